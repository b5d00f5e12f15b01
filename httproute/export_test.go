package httproute

// Unexported helpers the external tests reach.
var (
	ServiceMatches = serviceMatches
	RouteApply     = routeApply
	ServiceApply   = serviceApply
)
