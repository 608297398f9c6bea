package api

import "github.com/ax-scheduler/ax/api/wire"

// The bodies of the API's requests and answers are defined in package
// api/wire, which the client (api/apiclient) shares without the server;
// these are their names here.
type (
	TaskInfo            = wire.TaskInfo
	ApplyResult         = wire.ApplyResult
	TriggerTimes        = wire.TriggerTimes
	FireRequest         = wire.FireRequest
	FireResult          = wire.FireResult
	FireBatchResult     = wire.FireBatchResult
	FireBatchItem       = wire.FireBatchItem
	RerunRequest        = wire.RerunRequest
	CancelRequest       = wire.CancelRequest
	StreamInfo          = wire.StreamInfo
	ConsumerInfo        = wire.ConsumerInfo
	LogPage             = wire.LogPage
	Error               = wire.Error
	CreateTokenRequest  = wire.CreateTokenRequest
	CreatedToken        = wire.CreatedToken
	AlertRuleRequest    = wire.AlertRuleRequest
	AlertChannelRequest = wire.AlertChannelRequest

	taskList         = wire.TaskList
	instanceList     = wire.InstanceList
	streamList       = wire.StreamList
	errorBody        = wire.ErrorBody
	tokenList        = wire.TokenList
	workerList       = wire.WorkerList
	auditList        = wire.AuditList
	healthBody       = wire.HealthBody
	alertList        = wire.AlertList
	alertRuleList    = wire.AlertRuleList
	alertChannelList = wire.AlertChannelList
)

// HeaderOperator is [wire.HeaderOperator].
//
// Deprecated: the API records the name of the request's token as the
// operator of every change, and ignores this header.
const HeaderOperator = wire.HeaderOperator
