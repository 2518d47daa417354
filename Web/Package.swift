// swift-tools-version:6.1
// rampd-web, the web page for a headless box: an HTTP/WebSocket server that is a client of rampd's
// socket, a separate process so that rampd keeps its AF_UNIX-only sandbox. A package of its own,
// so that the main package's `swift build` resolves and builds rampd and rampctl without
// Hummingbird's graph (TLS, crypto, HTTP/2). Build and test it with script/web (`script/web build`,
// `script/web test`), which makes the link below first.
import PackageDescription

let package = Package(
  name: "rampd-web",
  platforms: [.macOS(.v14)],
  products: [
    .executable(name: "rampd-web", targets: ["rampd-web"])
  ],
  dependencies: [
    // The main package, through a link script/web makes (.build/rampd -> ../..): SwiftPM names a
    // path dependency after its directory, and the checkout's directory may be called anything.
    .package(path: ".build/rampd"),
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
    .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
    .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
  ],
  targets: [
    .executableTarget(
      name: "rampd-web",
      dependencies: [
        .product(name: "RampClient", package: "rampd"),
        .product(name: "RampSystem", package: "rampd"),
        .product(name: "RampProtocol", package: "rampd"),
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Hummingbird", package: "hummingbird"),
        .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "Logging", package: "swift-log"),
      ],
      resources: [.embedInCode("Page/page.html"), .embedInCode("Page/page.js"), .embedInCode("Page/page.css")],
      // Hummingbird imports Foundation: a file sees the members of what it imports itself, so that
      // Foundation's String methods do not stand in for the standard library's.
      swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]
    ),
    // The real rampd-web in front of the real rampd (the main package's debug build, or
    // RAMPD_TEST_BINARY), Chromium driving its page; its systemd unit, install and man page.
    .testTarget(
      name: "RampWebTests",
      dependencies: [
        .product(name: "RampTestSupport", package: "rampd"),
        .product(name: "RampProtocol", package: "rampd"),
      ]
    ),
  ]
)
