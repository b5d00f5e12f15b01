package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// RequestTimeout bounds each API request.
const RequestTimeout = 10 * time.Second

// Client reads and patches InferenceServices. It never retries.
type Client struct {
	Dynamic dynamic.Interface
	Action  Action // names the command in permission errors
}

// Get reads the target.
func (c Client) Get(ctx context.Context, namespace, name string) (Target, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	u, err := c.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Target{}, c.apiError(ctx, "get", namespace, err)
	}
	if u.GetAPIVersion() != v1beta1.SchemeGroupVersion.String() || u.GetKind() != "InferenceService" ||
		u.GetNamespace() != namespace || u.GetName() != name {
		return Target{}, ErrTargetMismatch
	}
	return TargetOf(u), nil
}

// Apply sends the plan's merge patch (dryRun=All for a server dry run) and returns the
// stored object's resourceVersion. The API server's refusal of the patch's UID or
// resourceVersion (the object changed after the read) is ErrConflict.
func (c Client) Apply(ctx context.Context, p *Plan, dry DryRun) (string, error) {
	u, err := c.patch(ctx, p.Target.Namespace, p.Target.Name, p.Patch(), dry)
	if err != nil {
		return "", err
	}
	return checkResponse(u, p)
}

// ApplyRamp sends a ramp annotation change to the InferenceService t (dryRun=All for a
// server dry run); a change of the object since it was read is ErrConflict.
func (c Client) ApplyRamp(ctx context.Context, t RampTarget, ch *RampChange, dry DryRun) error {
	_, err := c.patch(ctx, t.Namespace, t.Name, ch.RampPatch(t), dry)
	return err
}

// patch sends a guarded merge patch to the InferenceService namespace/name: ErrConflict
// when the API server refuses its UID or resourceVersion, a sanitized error otherwise.
func (c Client) patch(ctx context.Context, namespace, name string, body []byte, dry DryRun) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	opts := metav1.PatchOptions{}
	if dry == DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	u, err := c.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Patch(ctx, name, types.MergePatchType, body, opts)
	switch {
	case err == nil:
		return u, nil
	case isConflict(err):
		return nil, ErrConflict
	default:
		return nil, c.apiError(ctx, "patch", namespace, err)
	}
}

// checkResponse makes sure the response is the object the patch named.
func checkResponse(u *unstructured.Unstructured, p *Plan) (string, error) {
	if b, err := json.Marshal(u.Object); err != nil || len(b) > MaxPayloadBytes {
		return "", ErrResponseTooLarge
	}
	if u.GetAPIVersion() != v1beta1.SchemeGroupVersion.String() || u.GetKind() != "InferenceService" ||
		u.GetNamespace() != p.Target.Namespace || u.GetName() != p.Target.Name || u.GetUID() != p.Target.UID {
		return "", ErrResponseUnbound
	}
	if !SafeScalar(u.GetResourceVersion()) {
		return "", ErrResponseUnsafe
	}
	return u.GetResourceVersion(), nil
}

// isConflict reports the API server's refusal of the patch's UID or resourceVersion: the
// object changed after it was read. Both are read from the API status, never its message
// (checked against kube-apiserver v1.37 in integration/ops_test.go):
//   - a resourceVersion that is not the stored one (any write after the read, or a delete
//     and re-create, which always gets a newer resourceVersion) is 409 Conflict;
//   - a different UID at the stored resourceVersion is 422 Invalid with a FieldValueInvalid
//     cause on metadata.uid (uid is immutable). Within one etcd history a re-created object
//     never has the old resourceVersion, so this is the guard's second line only.
//
// The patch is a merge patch because a failed JSON Patch (a "test" op, or an op that no
// longer applies to a changed object) is a 422 Invalid with empty details, told apart from
// other 422s only by its message text.
func isConflict(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	if !apierrors.IsInvalid(err) {
		return false
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == metav1.CauseTypeFieldValueInvalid && c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// apiError turns an API error into a sanitized one. A permission error names the verb and
// the resource and what the command needs; admission text is never echoed.
func (c Client) apiError(ctx context.Context, verb, namespace string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("forbidden: cannot %s inferenceservices.ome.io in namespace %s; the %s needs get and patch on inferenceservices.ome.io and get on trafficmaps.ome.io",
			verb, namespace, c.Action)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(ctx.Err(), context.Canceled): // Ctrl-C (SIGINT) while the request ran
		return context.Canceled
	default:
		return ErrAPI
	}
}
