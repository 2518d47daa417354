// swift-tools-version:6.1
import PackageDescription

let package = Package(
  name: "rampd",
  platforms: [.macOS(.v14)],
  products: [
    .library(name: "RampEngine", targets: ["RampEngine"]),
    .executable(name: "rampctl", targets: ["rampctl"]),
    .executable(name: "rampbench", targets: ["rampbench"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
  ],
  targets: [
    // The animation engine: pure Swift, no I/O. Everything a unit test can reach without a sound card.
    .target(name: "RampEngine"),
    // What the command-line tools share and a unit test can check without a terminal: parsing
    // human units (2s, -6dB, 48k) and drawing plots. No ArgumentParser, no RampEngine.
    .target(name: "RampCLI"),
    .executableTarget(
      name: "rampctl",
      dependencies: [
        "RampEngine",
        "RampCLI",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]
    ),
    .executableTarget(
      name: "rampbench",
      dependencies: ["RampEngine"],
      path: "Benchmarks/rampbench"
    ),
    .testTarget(
      name: "RampEngineTests",
      dependencies: [
        "RampEngine",
        .product(name: "PropertyBased", package: "swift-property-based"),
      ]
    ),
    .testTarget(name: "RampCLITests", dependencies: ["RampCLI"]),
  ]
)
