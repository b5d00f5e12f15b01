package xds

// HoldsOld reports whether cl, relevant to the service key served as served and not
// confirming its current content (see Judge), holds older content of it: it declared or
// ACKed a version of one of the service's types that does not carry the current content
// (a state-of-the-world version_info sent on reconnecting, or an earlier ACK), or, as a
// delta stream, declared one of the service's resources (initial_resource_versions) at a
// version other than the one served. Such a client is no longer reconnecting or
// resubscribing: it routes by the older content until it ACKs the current one, so a
// reconnect grace must never waive it. A client that has neither declared nor ACKed
// anything of those types yet (still subscribing, or waiting for its first response)
// holds nothing older. Versions are content-derived, so a version declared before this
// process served the current content may be the current content itself (a restart): it
// is judged only once the current content is served (History.ServesCurrent).
func HoldsOld(cl ClientState, h *History, key string, served map[Flavour]Served) bool {
	sv, ok := served[cl.Flavour]
	if !ok {
		return false
	}
	if v := Judge(cl, h, key, served); !v.Relevant || v.Acked {
		return false
	}
	for _, typ := range confirmTypes {
		names := sv.Names[typ]
		if len(names) == 0 || (cl.TypeURL != "" && cl.TypeURL != typ) {
			continue
		}
		if a := cl.Acked[typ]; a != "" && !h.Carries(cl.Flavour, typ, a, key, sv.Digest) && h.ServesCurrent(cl.Flavour, typ, key, sv.Digest) {
			return true
		}
		for _, n := range names {
			if _, ok := cl.Stale[typ][n]; ok {
				return true
			}
		}
	}
	return false
}
