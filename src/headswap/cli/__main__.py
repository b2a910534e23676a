import sys

from headswap.cli.parser import main

sys.exit(main())
