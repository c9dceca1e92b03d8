"""``python -m bitnet_onnx.convert_gguf MODEL_DIR --outtype ... --outfile ...``"""

import sys

from .cli import main

sys.exit(main())
