// Package weights computes effective traffic weights for one OME InferenceService
// TrafficMap after operator drains are applied. It is pure computation: it depends
// only on the standard library, performs no I/O and keeps no state, so every
// function is safe for concurrent use.
//
// # Inputs
//
// The TrafficMap has one [Entry] per workload cluster, each with an endpoint URL, a
// weight in 0..[MaxWeight] and the drain IDs the routing controller already
// recorded on it (DrainRefs). Operators drain a cluster by adding a hold to the
// InferenceService annotation [DrainAnnotation], whose value is a JSON object keyed
// by drain ID:
//
//	{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}
//
// [ParseDrains] decodes that value strictly: duplicate IDs, duplicate or unknown
// fields and non-string values are rejected, IDs, clusters and reasons must be
// non-empty and carry no leading or trailing whitespace, and nothing but
// whitespace may follow the object. Malformed
// intent is an error, never silently ignored, so it cannot restore traffic by
// accident.
//
// # Rules
//
//   - An entry is held by every annotation drain naming its cluster and by every ID
//     in its own DrainRefs. A held entry is drained: its effective weight is 0.
//   - Several drains can hold one cluster; it comes back only when the last hold is
//     gone. An entry held only by its DrainRefs is drained too.
//   - An entry that is not held keeps its TrafficMap weight verbatim. The other
//     weights are not re-normalized: 7 and 3 with the first entry drained become 0
//     and 3.
//   - Drains are not validated against the entries. A drain naming a cluster that
//     has no entry is pending ([Result.Pending]); it holds that cluster the moment
//     an entry for it appears, so the new entry enters at weight 0.
//   - [Compute] validates the entries as a whole: each cluster is a lowercase
//     DNS-1123 subdomain used by exactly one entry, each weight is within
//     0..[MaxWeight], and each endpoint is an absolute http or https URL consisting
//     only of a scheme, a host and an optional port (at most a "/" path, no
//     userinfo, query or fragment). Every problem is reported as an [*EntryError],
//     in entry order, joined with errors.Join; match them with errors.Is against the
//     sentinels ([ErrClusterInvalid], [ErrDuplicateCluster], [ErrWeightRange],
//     [ErrEndpointInvalid]) or errors.As to *EntryError. Invalid input yields a zero
//     [Result]: nothing is half-applied.
//   - Output is deterministic: entries are sorted by cluster and ID lists by ID
//     regardless of input order, and the input slices are never mutated.
//
// # Fleet drains: taints and tolerations
//
// A workload cluster can carry [Taint]s (Modelplane's InferenceCluster spec.taints,
// or the [TaintsAnnotation] on an OME WorkloadCluster) and a service can carry
// [Toleration]s (the [TolerationsAnnotation] on its InferenceService), with exactly
// Modelplane's semantics:
//
//   - A toleration matches a taint by key and effect ([Toleration.Tolerates]):
//     operator Exists ignores the value, Equal (the default) needs key and value
//     equal, an empty key with Exists tolerates every taint, and an empty effect
//     matches both effects.
//   - A service stays on a cluster only if it tolerates every NoExecute taint
//     there. Each untolerated NoExecute taint holds the entry
//     ([EffectiveEntry.Taints], see [Untolerated]): the entry is drained, with
//     effective weight 0, until the taint is removed or tolerated; it comes back
//     only when no drain and no taint holds it.
//   - NoSchedule taints never move traffic.
//
// [ParseTaints] and [ParseTolerations] decode the JSON lists strictly, like
// [ParseDrains]: unknown or duplicate fields, non-strings, invalid keys, values,
// effects or operators and trailing data are errors naming the element and the
// rule.
package weights
