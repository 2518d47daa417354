// swift-tools-version:6.1
// rampd's bridges from the tools that already script sound: rampd-osc (Open Sound Control, for
// show controllers) and rampd-mqtt (an MQTT broker, for home automation and fleets of boxes).
// Each is a client of rampd's socket, as rampctl and rampd-web are. A package of its own, like
// Web/, so that the main package builds without their C libraries (liblo, libmosquitto). Build
// and test it with script/bridges (`script/bridges build`, `script/bridges test`).
import PackageDescription

let package = Package(
  name: "rampd-bridges",
  platforms: [.macOS(.v14)],
  products: [
    .executable(name: "rampd-osc", targets: ["rampd-osc"]),
    .executable(name: "rampd-mqtt", targets: ["rampd-mqtt"]),
  ],
  dependencies: [
    // The main package, through a link script/bridges makes (.build/rampd -> ../..), as in Web/.
    .package(path: ".build/rampd"),
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
  ],
  targets: [
    // liblo (Debian's liblo-dev) reads and writes OSC messages for rampd-osc.
    .systemLibrary(name: "CLiblo", path: "Sources/CLiblo", pkgConfig: "liblo", providers: [.apt(["liblo-dev"])]),
    .executableTarget(
      name: "rampd-osc",
      dependencies: [
        "CLiblo",
        .product(name: "RampClient", package: "rampd"),
        .product(name: "RampProtocol", package: "rampd"),
        .product(name: "RampEngine", package: "rampd"),
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]
    ),
    // libmosquitto from the system (Debian's libmosquitto-dev), found through pkg-config.
    .systemLibrary(
      name: "CMosquitto", path: "Sources/CMosquitto", pkgConfig: "libmosquitto",
      providers: [.apt(["libmosquitto-dev"])]),
    .executableTarget(
      name: "rampd-mqtt",
      dependencies: [
        "CMosquitto",
        .product(name: "RampClient", package: "rampd"),
        .product(name: "RampProtocol", package: "rampd"),
        .product(name: "RampEngine", package: "rampd"),
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]
    ),
    .testTarget(
      name: "OSCBridgeTests",
      dependencies: [
        .product(name: "RampTestSupport", package: "rampd"),
        .product(name: "RampProtocol", package: "rampd"),
      ]
    ),
    .testTarget(
      name: "MQTTBridgeTests",
      dependencies: [
        .product(name: "RampTestSupport", package: "rampd"),
        .product(name: "RampProtocol", package: "rampd"),
      ]
    ),
  ]
)
