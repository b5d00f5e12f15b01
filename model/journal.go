package model

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// Target prefixes of status.publisher.claimedTargets.
const (
	// TargetGRPC prefixes a map's "<service>.<namespace>" name.
	TargetGRPC = "grpc:"
	// TargetHostname prefixes a map's hostname (annotation or --host-template).
	TargetHostname = "hostname:"
)

// Bounds of the journal (the CRD's: MaxTrafficMapPublisherTargets and
// MaxTrafficMapPublisherTargetLength).
const (
	maxJournalTargets      = 128
	maxJournalTargetLength = 512
)

// JournaledNames are the names tm's journal holds, normalized and sorted, when the journal
// is publisher's ("" accepts any publisher's, for readers that do not know the name).
func JournaledNames(tm *v1beta1.TrafficMap, publisher string) []string {
	j := tm.Status.Publisher
	if j == nil || publisher != "" && j.PublisherName != publisher {
		return nil
	}
	names := make([]string, 0, len(j.ClaimedTargets))
	for _, t := range j.ClaimedTargets {
		if _, n, ok := strings.Cut(t, ":"); ok {
			names = append(names, n)
		}
	}
	return UniqueNames(names)
}

// ClaimTargets are the journal targets of names, typed by grpc (the map's gRPC name),
// sorted and unique.
func ClaimTargets(grpc string, names []string) []string {
	grpc = NormalizeHostname(grpc)
	out := make([]string, 0, len(names))
	for _, n := range UniqueNames(names) {
		if n == grpc {
			out = append(out, TargetGRPC+n)
		} else {
			out = append(out, TargetHostname+n)
		}
	}
	slices.Sort(out)
	return out
}

// journalOf is a journal holding names (nil when there are none and no digest), under
// publisher, with digest as observedOptionsDigest. It fails, a user error, when the journal
// would exceed the CRD's bounds.
func JournalOf(tm *v1beta1.TrafficMap, publisher, digest string, names []string) (*v1beta1.TrafficMapPublisherStatus, error) {
	targets := ClaimTargets(GRPCName(tm.Namespace, tm.Spec.Service), names)
	if len(targets) > maxJournalTargets {
		return nil, &UserError{Reason: ReasonInvalidTrafficMap, Message: fmt.Sprintf(
			"trafficmap %s/%s would claim %d names in status.publisher.claimedTargets, more than the %d allowed; the published state is left as it was",
			tm.Namespace, tm.Name, len(targets), maxJournalTargets)}
	}
	for _, t := range targets {
		if len(t) > maxJournalTargetLength {
			return nil, &UserError{Reason: ReasonInvalidTrafficMap, Message: fmt.Sprintf(
				"trafficmap %s/%s claims a name longer than status.publisher.claimedTargets allows (%d bytes): %.64s...",
				tm.Namespace, tm.Name, maxJournalTargetLength, t)}
		}
	}
	j := &v1beta1.TrafficMapPublisherStatus{PublisherName: publisher, ObservedOptionsDigest: digest}
	if len(targets) > 0 {
		j.ClaimedTargets = targets
	}
	if prev := tm.Status.Publisher; prev != nil && prev.PublisherName == publisher {
		j.LastPositive = prev.LastPositive // replaced only by withLastPositive
	}
	return j, nil
}

// lastPositive is status.publisher.lastPositive for a plan fully in place (Published True)
// with a positive weight: the map and source generations it was built from, its shape's
// digest (the options digest, the hostnames and each target's endpoint: a retained plan is
// replayable only while these still match) and each entry cluster's effective weight. It
// is nil when the plan has no positive weight or does not fit the schema (no source
// generation, more than 128 targets).
func LastPositive(tm *v1beta1.TrafficMap, p *Plan, optionsDigest string) *v1beta1.TrafficMapPublisherLastPositive {
	res := p.Result
	if res.AllZero() || tm.Generation < 1 || tm.Spec.ObservedISVCGeneration < 1 || len(res.Entries) > maxJournalTargets {
		return nil
	}
	lp := &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: tm.Generation, ObservedISVCGeneration: tm.Spec.ObservedISVCGeneration}
	shape := []string{"options=" + optionsDigest, "hostnames=" + strings.Join(p.Hostnames, ",")}
	for _, e := range res.Entries {
		lp.Targets = append(lp.Targets, v1beta1.TrafficMapPublisherTarget{Target: e.Cluster, Weight: int64(e.Effective)})
		shape = append(shape, "target="+e.Cluster+"="+e.Endpoint.URL)
	}
	lp.PlanCompatibilityDigest = OptionsDigest(shape)
	return lp
}

// OptionsDigest is observedOptionsDigest: the sha256 of the publisher options that shape
// a map's publication, given as "key=value" lines, sorted.
func OptionsDigest(options []string) string {
	lines := slices.Sorted(slices.Values(options))
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}
