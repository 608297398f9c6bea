package store

import "github.com/ax-scheduler/ax/schemas"

// The alert model, the health report and the summary are defined in
// schemas, which the API's client shares without the store; these are
// their names here.
type (
	AlertLevel       = schemas.AlertLevel
	AlertKind        = schemas.AlertKind
	AlertRule        = schemas.AlertRule
	AlertParams      = schemas.AlertParams
	AlertConfigError = schemas.AlertConfigError
	AlertChannelKind = schemas.AlertChannelKind
	AlertChannel     = schemas.AlertChannel
	AlertState       = schemas.AlertState
	Alert            = schemas.Alert
	FailureStreak    = schemas.FailureStreak
	HealthReport     = schemas.HealthReport
	HealthRules      = schemas.HealthRules
	MissedSchedule   = schemas.MissedSchedule
	SlowRun          = schemas.SlowRun
	Summary          = schemas.Summary
	RunTimes         = schemas.RunTimes
	SummaryBucket    = schemas.SummaryBucket
)

const (
	AlertP0                  = schemas.AlertP0
	AlertP1                  = schemas.AlertP1
	AlertP2                  = schemas.AlertP2
	AlertNoLiveExecutor      = schemas.AlertNoLiveExecutor
	AlertFailingTasks        = schemas.AlertFailingTasks
	AlertQuarantined         = schemas.AlertQuarantined
	AlertConsecutiveFailures = schemas.AlertConsecutiveFailures
	AlertTimeoutRate         = schemas.AlertTimeoutRate
	AlertBacklog             = schemas.AlertBacklog
	AlertDurationJitter      = schemas.AlertDurationJitter
	DefaultAlertThrottle     = schemas.DefaultAlertThrottle
	ChannelWebhook           = schemas.ChannelWebhook
	ChannelWeCom             = schemas.ChannelWeCom
	ChannelSlack             = schemas.ChannelSlack
	AlertFiring              = schemas.AlertFiring
	AlertAcked               = schemas.AlertAcked
	AlertResolved            = schemas.AlertResolved
)

var AlertKinds = schemas.AlertKinds
