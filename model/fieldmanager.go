package model

// DefaultFieldManager is the field manager of every write the publisher makes, and of the
// operator commands' status writes, so that the publisher's next write replaces theirs.
const DefaultFieldManager = "trafficmap-publisher"
