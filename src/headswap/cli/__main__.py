import sys

from headswap.cli.main import main

sys.exit(main())
