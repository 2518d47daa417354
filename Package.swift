// swift-tools-version:6.1
import PackageDescription

// The render thread touches class properties at every block; in a release build their dynamic
// exclusivity checks cost about a sixth of its time (measured with perf, docs/BENCHMARKS.md).
// Debug builds, which the tests run, keep the checks.
let renderPath: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]
// The same for the request path (parse, dispatch, reply, journal), on the event loop: the checks
// cost about 3 % of the instructions a `set` round trip takes there (callgrind).
let requestPath = renderPath
// TOMLKit imports Foundation (for Data and Date, FoundationEssentials' types): without this, its
// import lends Foundation's String methods to every file that sees TOMLKit, and a `contains` there
// linked Foundation, hence ICU. With it, a file sees the members of what it imports itself.
// For RampDaemon and the two tools, whose graph holds TOMLKit.
let ownImportsOnly: [SwiftSetting] = [.enableUpcomingFeature("MemberImportVisibility")]

// The version the tools report: script/package sets RAMPD_VERSION (from `git describe`, through
// script/version); other builds report the base version in Sources/CRampVersion/version.c.
let versionSettings: [CSetting] =
  Context.environment["RAMPD_VERSION"].flatMap { version in
    version.isEmpty ? nil : [.define("RAMPD_VERSION", to: "\"\(version)\"")]
  } ?? []

let package = Package(
  name: "rampd",
  platforms: [.macOS(.v14)],
  products: [
    .library(name: "RampSystem", targets: ["RampSystem"]),
    .library(name: "RampEngine", targets: ["RampEngine"]),
    .library(name: "RampAudio", targets: ["RampAudio"]),
    .library(name: "RampProtocol", targets: ["RampProtocol"]),
    // For the fuzz target in Fuzz/, a package of its own (built with sanitizers by script/fuzz).
    .library(name: "RampDaemon", targets: ["RampDaemon"]),
    .executable(name: "rampd", targets: ["rampd"]),
    .executable(name: "rampctl", targets: ["rampctl"]),
    .executable(name: "rampd-osc", targets: ["rampd-osc"]),
    .executable(name: "rampd-mqtt", targets: ["rampd-mqtt"]),
    .executable(name: "rampd-web", targets: ["rampd-web"]),
    .executable(name: "rampbench", targets: ["rampbench"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
    .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
    .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
  ],
  targets: [
    // The few C-library wrappers every module and tool shares in place of Foundation's (threads,
    // whole writes, path parts, trimming typed text), whose versions would bring Foundation's
    // internationalisation and ICU's data into every binary. No dependency.
    .target(name: "RampSystem"),
    // The animation engine: pure Swift, no audio and no sockets. Everything a unit test can reach
    // without a sound card.
    .target(name: "RampEngine", dependencies: ["RampSystem"], swiftSettings: renderPath),
    // C libraries, found through pkg-config (script/setup installs their -dev packages).
    .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
    .systemLibrary(name: "CSndFile", pkgConfig: "sndfile", providers: [.apt(["libsndfile1-dev"])]),
    .systemLibrary(name: "CSoxr", pkgConfig: "soxr", providers: [.apt(["libsoxr-dev"])]),
    .systemLibrary(name: "CEbur128", pkgConfig: "libebur128", providers: [.apt(["libebur128-dev"])]),
    // libpipewire, linked dynamically (it loads its own plugins with dlopen), and the C side of
    // the native PipeWire stream: the SPA pod builders it needs are macros and inline functions.
    .systemLibrary(name: "CPipeWire", pkgConfig: "libpipewire-0.3", providers: [.apt(["libpipewire-0.3-dev"])]),
    .target(name: "CPipeWireShim", dependencies: ["CPipeWire"]),
    // Linux's own interfaces that Glibc's module leaves out (eventfd).
    .systemLibrary(name: "CLinux"),
    // The audio path: decoding, resampling, gain and mix kernels, ALSA output, offline render,
    // loudness measurement. Knows the engine, not the protocol.
    .target(
      name: "RampAudio",
      dependencies: ["RampSystem", "RampEngine", "CALSA", "CSndFile", "CSoxr", "CEbur128", "CLinux", "CPipeWireShim"],
      swiftSettings: renderPath
    ),
    // What the command-line tools share and a unit test can check without a terminal: terminal
    // plots, timeline scripts, refusal texts. No ArgumentParser.
    .target(name: "RampCLI", dependencies: ["RampSystem", "RampEngine", "RampAudio", "RampProtocol", "RampClient"]),
    // A blocking connection to rampd's socket (greeting, requests, replies, events) and why a
    // conversation failed: shared by rampctl, rampd-web and the bridges, without the audio
    // libraries.
    .target(name: "RampClient", dependencies: ["RampProtocol"]),
    // The wire format shared by daemon and client: JSON values, requests, replies, events, error
    // codes, the human units (2s, -6dB, 48k) the daemon's configuration and rampctl both read.
    // Knows the engine's types (curves, animations), does no I/O.
    .target(name: "RampProtocol", dependencies: ["RampSystem", "RampEngine", "CRampVersion"], swiftSettings: requestPath),
    .target(name: "CRampVersion", cSettings: versionSettings),
    // In a debug build: counts heap allocations per thread (tests prove the render path makes
    // none), and traps one on rampd's render thread. A release build compiles none of it.
    .target(name: "CAllocationGuard", cSettings: [.define("RAMPD_ALLOCATION_GUARD", .when(configuration: .debug))]),
    // The daemon: configuration, the socket server, sessions, command dispatch onto the player.
    .target(
      name: "RampDaemon",
      dependencies: [
        "RampSystem",
        "RampEngine",
        "RampAudio",
        "RampProtocol",
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "TOMLKit", package: "TOMLKit"),
      ],
      swiftSettings: requestPath + ownImportsOnly
    ),
    .executableTarget(
      name: "rampd",
      dependencies: [
        "RampSystem",
        "RampDaemon",
        "RampCtlCommands",
        "RampOSC",
        "RampMQTT",
        "RampWeb",
        "RampAudio",
        "CAllocationGuard",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
      ],
      swiftSettings: ownImportsOnly
    ),
    // rampctl's commands, a library so that rampd's executable can carry them: one binary is both
    // tools, told apart by the name it is run by (`RampCtl.isInvokedName`), as busybox does, and
    // the package installs rampctl as a link to rampd (docs/PACKAGE-SIZE.md: two binaries were
    // mostly the same code, the daemon's included, which `rampctl render` runs).
    .target(
      name: "RampCtlCommands",
      dependencies: [
        "RampSystem",
        "RampEngine",
        "RampAudio",
        "RampCLI",
        "RampDaemon",
        "RampProtocol",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ],
      path: "Sources/rampctl",
      swiftSettings: ownImportsOnly
    ),
    // rampctl on its own, for a build tree (the package installs the link instead).
    .executableTarget(
      name: "rampctl", dependencies: ["RampCtlCommands"], path: "Sources/rampctl-main", swiftSettings: ownImportsOnly),
    // The bridges from the tools that already script sound, clients of rampd's socket as rampctl
    // is: rampd-osc (Open Sound Control, for show controllers) and rampd-mqtt (an MQTT broker, for
    // home automation and fleets of boxes). Libraries, so that rampd's executable carries them as
    // it carries rampctl (run by the name rampd-osc or rampd-mqtt, it is that bridge). They use
    // FoundationEssentials, the standard library and RampSystem, never Foundation's
    // internationalisation (ICU's 37 MB).
    // liblo (Debian's liblo-dev) reads and writes OSC messages for rampd-osc.
    .systemLibrary(name: "CLiblo", pkgConfig: "liblo", providers: [.apt(["liblo-dev"])]),
    .target(
      name: "RampOSC",
      dependencies: [
        "CLiblo", "RampClient", "RampProtocol", "RampSystem",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]
    ),
    // libmosquitto (Debian's libmosquitto-dev), rampd-mqtt's MQTT client.
    .systemLibrary(name: "CMosquitto", pkgConfig: "libmosquitto", providers: [.apt(["libmosquitto-dev"])]),
    .target(
      name: "RampMQTT",
      dependencies: [
        "CMosquitto", "RampClient", "RampProtocol", "RampSystem",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]
    ),
    // Each bridge on its own, for a build tree (the package installs links to rampd instead).
    .executableTarget(name: "rampd-osc", dependencies: ["RampOSC"], path: "Sources/rampd-osc-main"),
    .executableTarget(name: "rampd-mqtt", dependencies: ["RampMQTT"], path: "Sources/rampd-mqtt-main"),
    // rampd-web, the web page for a headless box: an HTTP/WebSocket server (SwiftNIO's own
    // HTTP/1.1 and WebSocket handlers) that is a client of rampd's socket, a separate process so
    // that rampd keeps its AF_UNIX-only sandbox. A library, so that rampd's executable can carry
    // it as it carries rampctl (`RampdWeb.invokedName`); the page's files are embedded in the code.
    .target(
      name: "RampWeb",
      dependencies: [
        "RampSystem",
        "RampProtocol",
        "RampClient",
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOWebSocket", package: "swift-nio"),
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ],
      resources: [.embedInCode("Page/page.html"), .embedInCode("Page/page.js"), .embedInCode("Page/page.css")],
      swiftSettings: ownImportsOnly
    ),
    // rampd-web on its own, for a build tree (the package installs a link to rampd instead).
    .executableTarget(
      name: "rampd-web", dependencies: ["RampWeb"], path: "Sources/rampd-web-main", swiftSettings: ownImportsOnly),
    .executableTarget(
      name: "rampbench",
      dependencies: ["RampEngine", "RampAudio"],
      path: "Benchmarks/rampbench"
    ),
    // What SwiftNIO alone costs per request: the floor under benchmark (a)'s round trips.
    .executableTarget(
      name: "nio-floor",
      dependencies: [
        .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
      ],
      path: "Benchmarks/nio-floor"
    ),
    .testTarget(
      name: "RampEngineTests",
      dependencies: [
        "RampSystem",
        "RampEngine",
        .product(name: "PropertyBased", package: "swift-property-based"),
      ]
    ),
    // Also tests rampctl's argument → request mapping, through `@testable import rampctl`.
    // And that the daemon's configuration reads human units as rampctl does (one parser).
    .testTarget(
      name: "RampCLITests",
      dependencies: ["RampCLI", "RampEngine", "RampAudio", "RampProtocol", "RampDaemon", "RampCtlCommands"]),
    .testTarget(
      name: "RampProtocolTests",
      dependencies: [
        "RampSystem",
        "RampProtocol",
        "RampEngine",
        .product(name: "PropertyBased", package: "swift-property-based"),
      ]
    ),
    .testTarget(
      name: "RampDaemonTests",
      dependencies: [
        "RampDaemon", "RampProtocol", "RampEngine", "RampAudio", .product(name: "Logging", package: "swift-log"),
        "CAllocationGuard", "RampTestSupport",
      ]
    ),
    // What the daemon tests, rampd-web's and the bridges' share: the real rampd and
    // rampctl run as processes, a line client, script/install into a temporary root, systemd
    // unit files.
    .target(name: "RampTestSupport", dependencies: ["RampProtocol", "RampAudio"], path: "Tests/RampTestSupport"),
    // The real bridges in front of the real rampd, driven by liblo's oscsend and Mosquitto's
    // broker and clients.
    .testTarget(name: "OSCBridgeTests", dependencies: ["RampTestSupport", "RampProtocol"]),
    .testTarget(name: "MQTTBridgeTests", dependencies: ["RampTestSupport", "RampProtocol"]),
    .testTarget(
      name: "RampAudioTests", dependencies: ["RampSystem", "RampAudio", "RampEngine", "CAllocationGuard", "RampTestSupport"]),
    // The real rampd-web in front of the real rampd, Chromium driving its page; its access check
    // and routes on their own; its systemd units, install and man page; and that it carries no ICU.
    .testTarget(
      name: "RampWebTests",
      dependencies: ["RampWeb", "RampProtocol", "RampTestSupport", .product(name: "NIOHTTP1", package: "swift-nio")]),
  ]
)
