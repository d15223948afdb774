import sys

from vllm_standin.cli import main

sys.exit(main())
