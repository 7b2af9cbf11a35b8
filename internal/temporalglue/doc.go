// Package temporalglue is the Temporal glue that idemguard's activity and
// workflow packages share: activity and workflow type names, the mapping of
// guard errors to Temporal application errors, the codec that stores
// results as Temporal payloads, the data converters the worker applies, and
// the header that carries a key from a workflow to its activities.
//
// Users see these through the activity package (its ErrorType constants,
// TemporalError, PayloadCodec, Name, and the key header functions), which
// exports them as thin aliases and wrappers; the workflow package uses them
// directly, so that it does not depend on the activity package.
package temporalglue
