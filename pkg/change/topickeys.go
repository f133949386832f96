package change

// TopicKeys is what the sink's ScanKeys found in a topic: the keys alive at the end of the records before
// a cut (an earlier copy's rows and changes) and the keys with a value at or after it (the
// current copy's rows).
type TopicKeys struct {
	Before map[string]struct{}
	After  map[string]struct{}
}
