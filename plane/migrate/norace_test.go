//go:build !race

package migrate_test

const raceWorlds = 0
