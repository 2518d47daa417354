import RampWeb

RampdWeb.main()
