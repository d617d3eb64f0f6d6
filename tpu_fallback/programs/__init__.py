"""The main logic of the two Pulumi programs; the __main__.py files only call main()."""
