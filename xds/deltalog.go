package xds

import "errors"

// deltaLogNames is the least number of touched names a typeCache's update log keeps (it
// keeps at least as many as the type serves). A delta wildcard stream whose map is
// complete for an update still in the log is answered from the log alone; an older one
// is sent every served resource (see deltaLog).
const deltaLogNames = 4096

// deltaGoneFactor bounds a deltaLog's tombstones: at most this many times the log's bound.
const deltaGoneFactor = 4

// logEntry is one update: its seq, and for each name it touched the version the name
// had before it ("" when absent).
type logEntry struct {
	seq  uint64
	prev map[string]string
}

// deltaLog is a typeCache's bounded log of recent updates, which lets a delta wildcard
// stream's returned-resources map be seqMark (the update it is complete for) plus only
// the names where what the stream holds differs from the table at that update
// (exceptions). A stream older than the log has lost what it holds: it is sent every
// served resource, and the removal of every tombstoned name (names removed and not served
// again; a removal of a name the client lacks is ignored). Tombstones are bounded too
// (deltaGoneFactor times the log's bound; past it they are cleared but for the update's
// own): a stream complete for an update before the clearing (goneFrom) cannot be told
// what it must drop, so it is not answered but closed (errBehind), and its client
// reconnects declaring what it holds. That needs a stream whose map fell behind through
// that many removals (it did not read a response meanwhile). Guarded by the typeCache's mu.
type deltaLog struct {
	entries []logEntry // oldest first
	names   int        // touched names over entries
	gone    map[string]struct{}
	// goneFrom: gone names every name removed by an update after goneFrom and not served
	// again since.
	goneFrom uint64
}

// errBehind closes a delta wildcard stream whose map is older than what the log can
// answer for: its client reconnects and declares the versions it holds.
var errBehind = errors.New("xds: delta stream too far behind the served resources to be told its removals; reconnect")

// record logs update seq, which touched prev's names, removing removed; bound is the
// number of names the log may keep (the oldest entries go first, the newest stays).
func (l *deltaLog) record(seq uint64, prev map[string]string, removed []string, bound int) {
	l.entries = append(l.entries, logEntry{seq: seq, prev: prev})
	l.names += len(prev)
	for len(l.entries) > 1 && l.names > bound {
		l.names -= len(l.entries[0].prev)
		l.entries[0] = logEntry{}
		l.entries = l.entries[1:]
	}
	if l.gone == nil {
		l.gone = map[string]struct{}{}
	}
	for name := range prev {
		delete(l.gone, name) // served again, or removed below
	}
	for _, name := range removed {
		l.gone[name] = struct{}{}
	}
	if len(l.gone) > deltaGoneFactor*bound {
		l.gone, l.goneFrom = map[string]struct{}{}, seq-1
		for _, name := range removed {
			l.gone[name] = struct{}{}
		}
	}
}

// since returns, for a stream complete for update seq, the version it held of each name an
// update after seq touched ("" when it did not hold the name); ok is false when the log
// no longer holds every update after seq.
func (l *deltaLog) since(seq, current uint64) (held map[string]string, ok bool) {
	if seq == current {
		return nil, true
	}
	if len(l.entries) == 0 || l.entries[0].seq > seq+1 || seq > current {
		return nil, false
	}
	held = map[string]string{}
	for i := len(l.entries) - 1; i >= 0 && l.entries[i].seq > seq; i-- {
		for name, v := range l.entries[i].prev { // the earliest update after seq wins
			held[name] = v
		}
	}
	return held, true
}
