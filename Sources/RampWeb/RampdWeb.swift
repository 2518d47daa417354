import ArgumentParser
import Dispatch
import FoundationEssentials
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

/// rampd-web's command line. Not the program's entry point: the executable rampd-web
/// (Sources/rampd-web-main), or rampd when run by the name `rampd-web`, calls `main()`.
public struct RampdWeb: ParsableCommand {
  /// The name rampd-web is run by: the executable's, or a link's to rampd.
  public static let invokedName = "rampd-web"

  public static let configuration = CommandConfiguration(
    commandName: invokedName,
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

  public init() {}

  /// Parses the command line and runs, then exits: what the executable rampd-web, or rampd run
  /// by that name, calls.
  public static func main() { main(nil) }

  public mutating func run() throws {
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
    try WebServer(settings: settings).run()
  }
}

/// The server: SwiftNIO's HTTP/1.1 codec, with the upgrade of `/live` to a WebSocket, in front of
/// `PageHandler` (the page) and `LiveRelay` (the WebSocket), on one event loop.
struct WebServer {
  let settings: WebSettings

  func run() throws {
    // run() always sets a token; an empty one would admit nobody.
    let access = AccessCheck(token: settings.token ?? "")
    let socket = settings.socket
    let upgrader = NIOWebSocketServerUpgrader(
      maxFrameSize: LiveRelay.maximumFrame,
      shouldUpgrade: { channel, head in
        // Refused or elsewhere: not upgraded, and `PageHandler` answers (401, 403, 404).
        guard head.uri.prefix(while: { $0 != "?" && $0 != "#" }) == "/live",
          case .admitted(let setCookie) = access.decide(head)
        else { return channel.eventLoop.makeSucceededFuture(nil) }
        var headers = HTTPHeaders()
        if setCookie { headers.add(name: "Set-Cookie", value: access.cookieHeader) }
        return channel.eventLoop.makeSucceededFuture(headers)
      },
      upgradePipelineHandler: { channel, _ in
        channel.eventLoop.makeCompletedFuture {
          try channel.pipeline.syncOperations.addHandler(LiveRelay(socket: socket))
        }
      })
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    defer { try? group.syncShutdownGracefully() }
    let bootstrap = ServerBootstrap(group: group)
      .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
      .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
          let pipeline = channel.pipeline.syncOperations
          try pipeline.configureHTTPServerPipeline(
            withServerUpgrade: (
              upgraders: [upgrader],
              completionHandler: { context in
                _ = context.pipeline.syncOperations.removeHandler(name: PageHandler.name)
              }
            ))
          try pipeline.addHandler(PageHandler(access: access), name: PageHandler.name)
        }
      }
    let address = settings.address
    let server: Channel
    do {
      server = try bootstrap.bind(to: SocketAddress(ipAddress: address, port: settings.port)).wait()
    } catch let error as IOError {
      // The server's only socket error is its bind: say which address, and why, in words.
      writeText(
        "rampd-web: \(Self.listenFailure(address: address, port: settings.port, errno: error.errnoCode))\n", to: 2)
      throw ExitCode.failure
    }
    let url = settings.url(port: server.localAddress?.port ?? 0)
    writeText("rampd-web: serving \(url) for rampd at \(socket)\n", to: 2)
    // SIGTERM and SIGINT close the listening socket: run() returns, and rampd-web exits 0.
    let stopping = [SIGTERM, SIGINT].map { number in
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
      source.setEventHandler { server.close(promise: nil) }
      source.resume()
      return source
    }
    try server.closeFuture.wait()
    for source in stopping { source.cancel() }
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
}
