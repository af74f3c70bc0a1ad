//go:build race

package migrate_test

// raceWorlds is the generated store's size under -race, which makes every
// import and read several times slower: the 10,000 run without it.
const raceWorlds = 2000
