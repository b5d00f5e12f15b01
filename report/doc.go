// Package report is the operator's status view of one TrafficMap, or of every TrafficMap that
// still sends traffic to a workload cluster. It reads the TrafficMap, the InferenceService's
// metadata and the publisher's HTTPRoute, and computes the effective weights with
// model.Compute, the very computation the publisher runs, so the command and the
// publisher cannot disagree. It shows the Published condition field by field and its
// message verbatim, never taking the message apart; the xDS client state comes from the
// publisher's /debug/xds document (model.XDSDebugState) when Reader.PublisherURL is set.
// [Check] tells whether what is published is what the inputs say.
package report
