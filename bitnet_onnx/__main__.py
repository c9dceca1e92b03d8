import sys

try:  # Ctrl-C while the package is imported: what bitnet_onnx.cli.main says for it, no traceback
    from bitnet_onnx.cli import main
except KeyboardInterrupt:
    print("bitnet-onnx: interrupted by SIGINT", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
