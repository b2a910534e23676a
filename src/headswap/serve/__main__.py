import sys

from headswap.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
