// The connection to rampd lives in RampClient, which rampd-web shares without the audio
// libraries; rampctl and the tests see it through RampCLI as before.
@_exported import RampClient
