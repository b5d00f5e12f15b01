package publish

import (
	"context"
	"slices"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
)

// The pipeline's side of the claim records (claims.go): what it records before a journal
// write, prunes after one, and how it reads the journal of a map it does not hold.

// claimKeeper is the reconciler's claim-record and journal-evidence steps (the methods
// below), apart from the pipeline's own.
type claimKeeper struct{ *reconciler }

// publishers are the publisher names the reconciler knows.
func (k claimKeeper) publishers() model.Publishers {
	return model.Publishers{Self: k.publisher, TakeOverFrom: k.takeOverFrom, Known: k.known}
}

// recordGrants records the grants of self (the names its journal holds that count, at their
// grant times) and of granted (now), before they are journaled. A map's own gRPC name needs
// no record.
func (r claimKeeper) recordGrants(ctx context.Context, tm *v1beta1.TrafficMap, self model.Claim, granted []string) error {
	if r.grants == nil {
		return nil
	}
	own := model.NormalizeHostname(model.GRPCName(tm.Namespace, tm.Spec.Service))
	var grants []model.Grant
	for _, n := range model.UniqueNames(self.Journaled) {
		if n != own {
			grants = append(grants, model.Grant{Name: n, At: self.Granted[n]})
		}
	}
	now := r.status.now()
	for _, n := range model.UniqueNames(granted) {
		if n != own && !slices.Contains(self.Journaled, n) {
			grants = append(grants, model.Grant{Name: n, At: now})
		}
	}
	want := model.NewClaimRecord(tm.Namespace, tm.Name, tm.UID, grants)
	if cur := r.grants.get(tm.Namespace, tm.Name); cur != nil && cur.UID == tm.UID && slices.Equal(cur.Grants, want.Grants) {
		return nil
	}
	if len(want.Grants) == 0 {
		return nil // nothing to record (a gRPC name alone); a stale record is pruned after the journal write
	}
	return r.grants.write(ctx, want)
}

// pruneRecord drops from tm's claim record the names its journal (as written) no longer
// holds; the record goes when it grants nothing.
func (r claimKeeper) pruneRecord(ctx context.Context, tm *v1beta1.TrafficMap) error {
	if r.grants == nil || tm == nil {
		return nil
	}
	cur := r.grants.get(tm.Namespace, tm.Name)
	if cur == nil || cur.UID != tm.UID {
		return nil
	}
	journaled := model.JournaledNames(tm, r.publisher)
	keep := slices.DeleteFunc(slices.Clone(cur.Grants), func(g model.Grant) bool { return !slices.Contains(journaled, g.Name) })
	if len(keep) == len(cur.Grants) {
		return nil
	}
	return r.grants.write(ctx, model.NewClaimRecord(tm.Namespace, tm.Name, tm.UID, keep))
}

// heldEvidence is the evidence tm is planned with as its holder has it: own (this
// publisher's reading, or a journal it adopts) is used for a map this publisher holds;
// another known publisher's journal counts under the claim policy, each name ranking after
// every grant this publisher recorded (model.ForeignEvidence); an unknown publisher's
// journal counts for nothing (model.UnknownEvidence).
func (r claimKeeper) heldEvidence(tm *v1beta1.TrafficMap, own model.Evidence, policy model.ClaimPolicy) model.Evidence {
	h := model.HolderOf(tm, r.publishers())
	switch {
	case h.Unknown:
		return model.UnknownEvidence(tm)
	case h.Hold == model.HoldOther || h.Hold == model.HoldTakeOver:
		return model.ForeignEvidence(tm, policy)
	}
	return own
}

// reportIgnored reports the entries of tm's journal that do not count (once per change of
// them): a log line, the metric by reason, and a Warning Event naming each entry, the field
// and the rule.
func (r claimKeeper) reportIgnored(tm *v1beta1.TrafficMap, ignored []model.Ignored, log *zap.Logger) {
	var b strings.Builder
	for _, ig := range ignored {
		b.WriteString(ig.Target + "\x00" + string(ig.Reason) + "\x00")
	}
	if !r.ignored.changed(model.KeyOf(tm), b.String()) || len(ignored) == 0 {
		return
	}
	msg := model.IgnoredMessage(tm, ignored)
	reasons := make([]string, 0, len(ignored))
	for _, ig := range ignored {
		reasons = append(reasons, string(ig.Reason))
		r.metrics.journalIgnored(ig.Reason)
	}
	log.Info("claim journal entries ignored: they grant no name", zap.Int("entries", len(ignored)), zap.Strings("reasons", reasons),
		zap.String("field", "status.publisher.claimedTargets"))
	if r.status != nil && r.status.recorder != nil {
		r.status.recorder.Event(tm, corev1.EventTypeWarning, string(model.ReasonClaimJournalIgnored), msg)
	}
}

// dropIgnored rewrites tm's journal, when it is this publisher's, without the entries that
// do not count (ev.Ignored), and returns the map as stored: OME's tools read the journal,
// and must not read a forged claim there. It replaces the journal with a merge patch, as
// server-side apply cannot remove entries another field manager (the tenant's) wrote. A name
// dropped that the map still claims is granted again as a fresh claim (claim).
func (r claimKeeper) dropIgnored(ctx context.Context, tm *v1beta1.TrafficMap, ev model.Evidence, log *zap.Logger) (*v1beta1.TrafficMap, bool, error) {
	if j := tm.Status.Publisher; len(ev.Ignored) == 0 || j == nil || j.PublisherName != r.publisher {
		return tm, false, nil
	}
	j, err := model.JournalOf(tm, r.publisher, r.digest, ev.Journaled)
	if err != nil {
		return tm, false, err
	}
	updated, err := r.status.replaceJournal(ctx, tm, j)
	if err != nil {
		return tm, false, err
	}
	log.Info("claim journal rewritten without the entries that grant no name", zap.Strings("journal", j.ClaimedTargets))
	return updated, true, nil
}

// keeper is r's claimKeeper.
func keeper(r *reconciler) claimKeeper { return claimKeeper{r} }
