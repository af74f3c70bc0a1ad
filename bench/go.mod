module github.com/orrery-run/orrery/bench

go 1.26.0

require github.com/orrery-run/orrery v0.0.0

replace github.com/orrery-run/orrery => ../
