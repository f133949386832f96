// Package supervise decides, for `cdc run`, whether a failed life of the pipeline is retried or
// the service stops. The pipeline runs one life at a time (pipeline.Life: start-up, the stages,
// an orderly stop); Run starts lives until its context ends or an error needs a person.
//
// Input: a pipeline.Pipeline and its context. Output: nil once the context ended and the last
// life stopped in order, else the error that ended the service (cmd/cdc logs it and exits 1).
//
// Classification happens once, here: fatal errors (pipeline.ErrFatal, replication.ErrSetup),
// a slot lost while running, the broker's authorizer refusing cdc's principal, and an
// unreachable server at the very first start (configuration to show at once) end the service;
// a connection that was open and then lost, a fence without another instance and a promoted
// standby start a new life, the last at once, the others after a capped exponential backoff
// (1 s to 30 s, reset after a life of two minutes).
package supervise
