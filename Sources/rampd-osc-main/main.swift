import RampOSC

RampdOSC.main()
