package plane

// FireLane is the lane, of n, in which a host fires world's timers.
var FireLane = fireLane
