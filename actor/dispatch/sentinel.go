package dispatch

// sentinel is the type of this package's error sentinels: a string
// constant, so a sentinel can be neither reassigned nor mutated, and
// errors.Is matches it by value.
type sentinel string

func (e sentinel) Error() string { return string(e) }
