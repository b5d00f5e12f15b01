package drain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	omeclient "github.com/trafficmap/publisher/api/client/clientset/versioned"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/model/statusapply"
)

// FieldManager is the field manager the Published flip is applied under for a map no
// publisher's claim journal holds (or OME's): the default publisher's own
// (model.DefaultFieldManager). A map whose journal names a publisher is flipped under that
// publisher's manager (flipManager), so that its next status write replaces the flip.
const FieldManager = model.DefaultFieldManager

// flipManager is the field manager of the publisher whose claim journal holds tm
// (model.FieldManagerFor its name), FieldManager without one or for OME's publisher.
func flipManager(tm *v1beta1.TrafficMap) string {
	if j := tm.Status.Publisher; j != nil && j.PublisherName != "" && j.PublisherName != model.OMEPublisherName {
		return model.FieldManagerFor(j.PublisherName)
	}
	return FieldManager
}

// flipAttempts bounds the retries of a flip whose read went stale (the publisher wrote the
// status in between).
const flipAttempts = 3

// Errors of the Published flip. Neither stops the action: the annotation patch is still
// sent and the command warns.
var (
	// ErrNoTrafficMap: no TrafficMap named as the service publishes it (routing is off for
	// the service); there is no Published condition to flip.
	ErrNoTrafficMap = errors.New("no trafficmap publishes the service")
	// ErrFlipForbidden: RBAC refused the read of the TrafficMap or the write of its status.
	ErrFlipForbidden = errors.New("forbidden")
)

// Flip is the Published=False a drain or undrain wrote before its annotation patch.
type Flip struct {
	// Map is the TrafficMap as stored after the write; as read when the write failed; nil
	// when it could not be read.
	Map *v1beta1.TrafficMap
	// Condition is the Published condition as stored; zero when none was written.
	Condition metav1.Condition
}

// Written reports whether the flip was written.
func (f Flip) Written() bool { return f.Condition.Type != "" }

// MapClient flips the Published condition of the TrafficMap that publishes a plan's target.
type MapClient struct {
	Maps omeclient.Interface
}

// PublishingMessage is the Published condition's message for a plan: it names the action,
// the drain ID and the cluster.
func PublishingMessage(p *Plan) string {
	return fmt.Sprintf("publisher %s of %s on %s requested; not yet published",
		p.Request.Action, p.Request.ID, p.Cluster)
}

// MarkPublishing sets Published=False (reason model.ReasonPublishing, message
// PublishingMessage, observedGeneration the map's generation) on the TrafficMap named as the
// plan's target, whose spec.service must name it. It server-side applies the status under
// the holder's field manager (flipManager) with force, exactly the fields the publisher owns: published false and the
// one condition, with observedTrafficMapGeneration and gatewayRef as they are, at the read
// resourceVersion (re-read and retried when the publisher wrote in between). The condition's
// lastTransitionTime moves only when its status does (meta.SetStatusCondition's rule).
// DryRunServer sends the apply with dryRun=All; DryRunClient must not call it.
//
// A missing map is ErrNoTrafficMap; a refused read or write wraps ErrFlipForbidden. When
// the write fails, the returned Flip holds the map as last read.
func (c MapClient) MarkPublishing(ctx context.Context, p *Plan, dry DryRun, now time.Time) (Flip, error) {
	return c.mark(ctx, p, dry, now, PublishingMessage(p))
}

// PatchedMessage is the Published condition's message once the plan's patch is stored.
func PatchedMessage(p *Plan) string {
	return fmt.Sprintf("publisher %s of %s on %s stored; not yet published", p.Request.Action, p.Request.ID, p.Cluster)
}

// MarkPatched flips Published to False again, with PatchedMessage, once the plan's patch is
// stored, exactly as MarkPublishing does. A True condition written after it is one the
// publisher decided after the patch (it decides from a map at least as new as its read and
// from an InferenceService it checked live), so `--wait` takes this flip as its baseline: a
// True written between the first flip and the patch was about the weights before it.
func (c MapClient) MarkPatched(ctx context.Context, p *Plan, now time.Time) (Flip, error) {
	return c.mark(ctx, p, DryRunNone, now, PatchedMessage(p))
}

func (c MapClient) mark(ctx context.Context, p *Plan, dry DryRun, now time.Time, message string) (Flip, error) {
	return c.Mark(ctx, p.Target.Namespace, p.Target.Name, dry, now, message)
}

// Mark sets Published=False with message on the TrafficMap namespace/name, exactly as
// MarkPublishing does for a plan's target (the same request, retries and errors). The
// taint and untaint commands use it for every map whose traffic they move.
func (c MapClient) Mark(ctx context.Context, ns, name string, dry DryRun, now time.Time, message string) (Flip, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var err error
	var tm *v1beta1.TrafficMap
	for range flipAttempts {
		tm, err = c.Maps.OmeV1beta1().TrafficMaps(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return Flip{}, ErrNoTrafficMap
		case apierrors.IsForbidden(err):
			return Flip{}, fmt.Errorf("%w: cannot get trafficmaps.ome.io in namespace %s", ErrFlipForbidden, ns)
		case err != nil:
			return Flip{}, fmt.Errorf("get trafficmap %s/%s: %w", ns, name, err)
		}
		if tm.Spec.Service != name {
			return Flip{}, ErrNoTrafficMap
		}
		cond := publishingCondition(tm, message, now)
		opts := metav1.ApplyOptions{FieldManager: flipManager(tm), Force: true}
		if dry == DryRunServer {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var stored *v1beta1.TrafficMap
		stored, err = c.Maps.OmeV1beta1().TrafficMaps(ns).ApplyStatus(ctx, FlipConfiguration(tm, cond), opts)
		switch {
		case err == nil:
			if c := meta.FindStatusCondition(stored.Status.Conditions, v1beta1.ConditionPublished); c != nil {
				cond = *c // as stored
			}
			return Flip{Map: stored, Condition: cond}, nil
		case apierrors.IsConflict(err):
			continue // the status changed since the read: read it again
		case apierrors.IsForbidden(err):
			return Flip{Map: tm}, fmt.Errorf("%w: cannot patch trafficmaps.ome.io/status in namespace %s", ErrFlipForbidden, ns)
		default:
			return Flip{Map: tm}, fmt.Errorf("apply trafficmap %s/%s status: %w", ns, name, err)
		}
	}
	return Flip{Map: tm}, fmt.Errorf("apply trafficmap %s/%s status: %w", ns, name, err)
}

// publishingCondition is the Published=False condition for p on tm, with the time rule of
// meta.SetStatusCondition; times are whole seconds, as the API stores them.
func publishingCondition(tm *v1beta1.TrafficMap, message string, now time.Time) metav1.Condition {
	conds := slices.Clone(tm.Status.Conditions)
	meta.SetStatusCondition(&conds, metav1.Condition{
		Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse, Reason: string(model.ReasonPublishing),
		Message: message, ObservedGeneration: tm.Generation, LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
	})
	return *meta.FindStatusCondition(conds, v1beta1.ConditionPublished)
}

// FlipConfiguration is the server-side apply request of a flip: the publisher-owned status
// fields as publish writes them (published, the Published condition, and
// observedTrafficMapGeneration and gatewayRef as tm has them), at tm's resourceVersion.
func FlipConfiguration(tm *v1beta1.TrafficMap, cond metav1.Condition) *omeac.TrafficMapApplyConfiguration {
	return statusapply.Configuration(tm, false, tm.Status.ObservedTrafficMapGeneration, tm.Status.GatewayRef, cond, tm.Status.Publisher)
}
