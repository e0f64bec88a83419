import sys

from launch.pair import main

sys.exit(main())
