// Package temporalerr hands package nexusguard the Temporal error mapping
// that package activity keeps unexported, so that a guard error means the
// same to a workflow whether an activity or a Nexus operation returned it,
// and the mapping lives in one place. Package activity sets [FromGuard]
// when it is initialised; nexusguard imports activity, so the hook is set
// before nexusguard runs. Users never see it (the accessor pattern of
// grpc-go's internal packages).
package temporalerr

import "time"

// FromGuard converts an error returned by a guard into the Temporal
// application error that activity.TemporalError makes of it (type,
// message, retryability), with the next-retry delay of an in-progress
// error running to the holder's lease end plus skew, capped by maxDelay
// when it is positive. Other errors come back untouched. Set by package
// activity.
var FromGuard func(err error, maxDelay, skew time.Duration) error
