module github.com/ax-scheduler/ax/bench

go 1.26.8

replace github.com/ax-scheduler/ax => ../
