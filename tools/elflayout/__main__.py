from elflayout.cli import main

raise SystemExit(main())
