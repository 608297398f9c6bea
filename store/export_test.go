package store

// WithWaiting is the look PromoteWaiting takes first, for the tests of its plan.
const WithWaiting = withWaiting
