import ArgumentParser
import FoundationEssentials
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

@main
struct RampdWeb: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "rampd-web",
    abstract: "A web page for rampd: faders, fades, meters and the event log, in a browser.",
    discussion: """
      rampd-web is a client of rampd's socket, as rampctl is: it serves one page, and a WebSocket \
      (/live) through which the page speaks rampd's protocol. It listens on 127.0.0.1:6690 by \
      default. Every request must carry its token, as /?token=TOKEN when opening the page (the \
      page then keeps it in a cookie), or as the header Authorization: Bearer TOKEN: it prints \
      the page's address with the token when it starts, and --show-url prints it again. The \
      token is --token-file's or RAMPD_WEB_TOKEN when given (an address that is not a loopback \
      address needs one of these); otherwise rampd-web makes one on its first start, 192 bits \
      from the kernel's random generator, and keeps it in the file token in its state directory \
      (STATE_DIRECTORY under systemd, else $XDG_STATE_HOME/rampd-web or \
      ~/.local/state/rampd-web, /var/lib/rampd-web for root), readable by its user alone.

      Environment: RAMPD_WEB_LISTEN, RAMPD_WEB_PORT and RAMPD_WEB_TOKEN stand for the flags; \
      RAMPD_SOCKET (or RAMPD_SOCKET_PATH) for --socket.
      """,
    version: RampdBuild.version
  )

  @Option(help: "The address to listen on, an IP address or localhost (default 127.0.0.1).")
  var listen: String?

  @Option(help: "The TCP port (default 6690; 0 picks a free one).")
  var port: Int?

  @Option(name: .customLong("token-file"), help: "A file holding the token every request must carry.")
  var tokenFile: String?

  @Option(help: "rampd's socket (default: as rampctl finds it).")
  var socket: String?

  @Flag(
    name: .customLong("show-url"),
    help: "Print the page's address with its token (made now if there is none yet) and exit.")
  var showURL = false

  mutating func run() async throws {
    let environment = ProcessInfo.processInfo.environment
    let isRoot = geteuid() == 0
    var settings: WebSettings
    do {
      settings = try WebSettings.resolve(
        listen: listen, port: port, tokenFile: tokenFile, socket: socket, environment: environment, isRoot: isRoot)
    } catch {
      // Exit 64 (EX_USAGE), as rampd and rampctl do for bad usage; systemd does not restart it.
      throw ValidationError(error.description)
    }
    var made: String?
    if settings.token == nil {
      do {
        let stored = try WebToken.load(in: WebToken.directory(environment: environment, isRoot: isRoot))
        settings.token = stored.token
        if stored.made { made = stored.path }
      } catch {
        writeText("rampd-web: \(error.description)\n", to: 2)
        // 73 (EX_CANTCREAT): the state directory is not writable; usage is not at fault.
        throw ExitCode(73)
      }
    }
    if let made { writeText("rampd-web: made a token, kept in \(made)\n", to: 2) }
    if showURL {
      print(settings.url(port: settings.port))
      return
    }
    try await WebServer(settings: settings).run()
  }
}

/// The HTTP side: the page's three files and the WebSocket, behind `AccessCheck`.
struct WebServer {
  let settings: WebSettings

  func run() async throws {
    var logger = Logger(label: "rampd-web")
    logger.logLevel = .notice
    let router = Router(context: BasicWebSocketRequestContext.self)
    // run() always sets a token; an empty one would admit nobody.
    router.middlewares.add(AccessCheck(token: settings.token ?? ""))
    router.get("/") { _, _ in Self.file(PageFiles.html, "text/html; charset=utf-8") }
    router.get("/page.js") { _, _ in Self.file(PageFiles.script, "text/javascript; charset=utf-8") }
    router.get("/page.css") { _, _ in Self.file(PageFiles.style, "text/css; charset=utf-8") }
    router.get("/favicon.ico") { _, _ in Response(status: .noContent) }
    let socket = settings.socket
    router.ws("/live") { inbound, outbound, _ in
      try await LiveRelay(socket: socket).run(inbound: inbound, outbound: outbound)
    }
    let address = settings.address
    let page = settings
    let app = Application(
      router: router,
      server: .http1WebSocketUpgrade(webSocketRouter: router),
      configuration: .init(address: .hostname(address, port: settings.port), serverName: "rampd-web"),
      onServerRunning: { channel in
        let url = page.url(port: channel.localAddress?.port ?? 0)
        writeText("rampd-web: serving \(url) for rampd at \(socket)\n", to: 2)
      },
      logger: logger
    )
    do {
      try await app.runService()
    } catch let error as IOError {
      // The server's only socket error is its bind: say which address, and why, in words.
      writeText(
        "rampd-web: \(Self.listenFailure(address: address, port: settings.port, errno: error.errnoCode))\n", to: 2)
      throw ExitCode.failure
    }
  }

  /// Why listening on `address`:`port` failed, from the errno of the bind: `cannot listen on
  /// 127.0.0.1:6690: address already in use (another rampd-web?)`.
  static func listenFailure(address: String, port: Int, errno code: Int32) -> String {
    let host = address.contains(":") ? "[\(address)]" : address
    var reason = String(cString: strerror(code))
    if let first = reason.first { reason = first.lowercased() + reason.dropFirst() }
    let hint =
      switch code {
      case EADDRINUSE: " (another rampd-web? choose another with --port or RAMPD_WEB_PORT)"
      case EACCES: " (a port below 1024 needs privileges; choose another with --port)"
      case EADDRNOTAVAIL: " (no interface of this machine has that address)"
      default: ""
      }
    return "cannot listen on \(host):\(port): \(reason)\(hint)"
  }

  static func file(_ bytes: [UInt8], _ type: String) -> Response {
    Response(
      status: .ok,
      headers: [
        .contentType: type, .cacheControl: "no-store",
        .contentSecurityPolicy: "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        .init("Referrer-Policy")!: "no-referrer", .init("X-Content-Type-Options")!: "nosniff",
      ],
      body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
  }
}

/// The page's files, embedded in the binary (Sources/rampd-web/Page).
enum PageFiles {
  static let html = PackageResources.page_html
  static let script = PackageResources.page_js
  static let style = PackageResources.page_css
}
