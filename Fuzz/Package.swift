// swift-tools-version:6.1
// The libFuzzer target for rampd's protocol decoder and dispatcher. A package of its own, so the
// main package's `swift build` never sees it: script/fuzz builds it with
// `-sanitize=fuzzer,address`, into Fuzz/.build.
import PackageDescription

let package = Package(
  name: "rampd-fuzz",
  platforms: [.macOS(.v14)],
  dependencies: [
    // The main package, through a link script/fuzz makes (.build/rampd -> ../..): SwiftPM names a
    // path dependency after its directory, and a checkout in a directory named `fuzz` would clash
    // with this package's own name.
    .package(path: ".build/rampd"),
    .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
  ],
  targets: [
    .target(name: "CFuzzDriver"),
    .executableTarget(
      name: "RampFuzz",
      dependencies: [
        "CFuzzDriver",
        .product(name: "RampDaemon", package: "rampd"),
        .product(name: "RampProtocol", package: "rampd"),
        .product(name: "Logging", package: "swift-log"),
      ]
    ),
  ]
)
