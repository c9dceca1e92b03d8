from bitnet_onnx.cli import main

raise SystemExit(main())
