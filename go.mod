module github.com/orrery-run/orrery

go 1.26
