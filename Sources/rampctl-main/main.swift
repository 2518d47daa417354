import RampCtlCommands

RampCtl.main()
