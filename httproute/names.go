package httproute

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Label and annotation keys the publisher puts on everything it creates. An object is owned
// by the publisher only when it carries all ownership labels with the exact source values.
const (
	LabelManagedBy       = "app.kubernetes.io/managed-by"
	ManagedByValue       = "trafficmap-publisher"
	LabelSourceNamespace = "publisher.trafficmap.dev/source-namespace"
	LabelSourceName      = "publisher.trafficmap.dev/source-name"
	LabelCluster         = "publisher.trafficmap.dev/cluster"

	// AnnotationDrains records, on the route, the last valid drain set the route was built
	// from, so a malformed annotation keeps the same drains across publisher restarts.
	AnnotationDrains = "publisher.trafficmap.dev/drains"
	// AnnotationTrafficMapGeneration records the TrafficMap generation the route was built from.
	AnnotationTrafficMapGeneration = "publisher.trafficmap.dev/trafficmap-generation"
	// AnnotationBackendKind records, on the route, the backend kind its backendRefs point at
	// (BackendKind; never auto); absent means service-externalname.
	AnnotationBackendKind = "publisher.trafficmap.dev/backend-kind"
)

const maxNameLength = 63

// routeSuffix ends every route name RouteName derives.
const routeSuffix = "-global"

// RouteName returns the HTTPRoute name for the TrafficMap named mapName: "<mapName>-global",
// made a DNS-1035 label of at most 63 characters. Distinct map names give distinct route names.
func RouteName(mapName string) string {
	return boundedName(mapName+routeSuffix, mapName)
}

// RouteMapName returns the map name whose RouteName is routeName when routeName is that
// name with "-global" appended (every map name that is a short DNS-1035 label), and false
// otherwise: a name RouteName had to bound or sanitize is not derived back.
func RouteMapName(routeName string) (string, bool) {
	name, ok := strings.CutSuffix(routeName, routeSuffix)
	if !ok || RouteName(name) != routeName {
		return "", false
	}
	return name, true
}

// ServiceName returns the backend Service name for one cluster of one TrafficMap. The name is
// readable ("<map>-<cluster>-<hash>") and the hash over the NUL-joined tuple keeps it
// collision-free even where the readable part is truncated or ambiguous.
func ServiceName(namespace, mapName, cluster string) string {
	return hashedName("trafficmap-backend/v1", namespace, mapName, cluster)
}

// SelectorlessServiceName returns the name of the selector-less Service (BackendEndpointSlice)
// for one cluster of one TrafficMap: like ServiceName, "<map>-<cluster>-<hash>", with a
// hash over another tuple, so it never equals the ExternalName Service's name and a switch
// of kind writes a new Service next to the old one instead of changing its type in place.
func SelectorlessServiceName(namespace, mapName, cluster string) string {
	return hashedName("trafficmap-backend-eps/v1", namespace, mapName, cluster)
}

// hashedName is "<map>-<cluster>-<hash>" bounded to 63 characters, the hash over the
// NUL-joined version, namespace, map and cluster.
func hashedName(version, namespace, mapName, cluster string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{version, namespace, mapName, cluster}, "\x00")))
	suffix := "-" + hex.EncodeToString(sum[:4])
	readable := sanitize(mapName + "-" + cluster)
	if room := maxNameLength - len(suffix); len(readable) > room {
		readable = strings.TrimRight(readable[:room], "-")
	}
	return readable + suffix
}

// boundedName makes name a DNS-1035 label of at most 63 characters; when it must be cut, a
// hash of seed keeps distinct inputs distinct.
func boundedName(name, seed string) string {
	s := sanitize(name)
	if len(s) <= maxNameLength && s == name {
		return s
	}
	sum := sha256.Sum256([]byte(seed))
	suffix := "-" + hex.EncodeToString(sum[:4])
	if room := maxNameLength - len(suffix); len(s) > room {
		s = strings.TrimRight(s[:room], "-")
	}
	return s + suffix
}

// sanitize maps an object name onto DNS-1035 label characters: dots become dashes and a
// leading non-letter gets an "a" prefix.
func sanitize(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	s := string(b)
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		s = "a" + s
	}
	return s
}

// RecordName returns the name of the record ConfigMap in which the publisher keeps the
// fallback state of the TrafficMap named mapName while the HTTPRoute sink is off: the map's
// route name, bounded and distinct per map.
func RecordName(mapName string) string { return RouteName(mapName) }
