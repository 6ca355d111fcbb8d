"""SQLite storage on apsw: one open helper, migrations, and one module per table family."""
