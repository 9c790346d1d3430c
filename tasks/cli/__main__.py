"""`python -m tasks.cli`: the `baton` command without the installed script."""

from tasks.cli.main import main

raise SystemExit(main())
