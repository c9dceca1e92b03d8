"""The strings-in graph's parts, one job a module; ``bitnet_onnx.export.text_input`` lists them and puts
their graph in front of the model."""
