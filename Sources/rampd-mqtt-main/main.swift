import RampMQTT

RampdMQTT.main()
