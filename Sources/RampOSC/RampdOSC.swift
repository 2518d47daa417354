import ArgumentParser
import FoundationEssentials
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

/// Run by this name (the package's link to rampd), rampd's executable is rampd-osc.
public struct RampdOSC: ParsableCommand {
  public static let invokedName = "rampd-osc"

  public static let configuration = CommandConfiguration(
    commandName: invokedName,
    abstract: "Open Sound Control for rampd: show controllers set, fade, play and stop over UDP or TCP.",
    discussion: """
      rampd-osc is a client of rampd's socket, as rampctl is. It listens for OSC 1.0/1.1 packets on \
      one address and port, over UDP and over TCP (each packet framed with SLIP, as OSC 1.1 says, or \
      preceded by its size, as OSC 1.0 senders such as liblo's oscsend do), \
      127.0.0.1:9000 by default, and turns each message into a request to rampd:

        /rampd/master/gain ,f 0.5          set master.gain (the key path, / for .)
        /rampd/streams/bed/gain ,ff 0.3 2  set streams.bed.gain in 2 s
        /rampd/set ,sff KEY VALUE SECONDS  set, the duration optional
        /rampd/fade ,sff KEY TO SECONDS    fade, the duration optional
        /rampd/play ,ss PATH STREAM        play, the stream optional
        /rampd/stop ,sf STREAM SECONDS     stop (pause, resume), both optional
        /rampd/duck ,s RULE                duck (unduck) by a rule's name
        /rampd/get ,s KEY                  the key path's values, in the reply
        /rampd/ping                        a reply, to check the way there and back

      Numbers may be sent as f, d, i or h. A bundle's timetag is the command's `at`: rampd applies it \
      on the output sample heard at that wall-clock time; the immediate timetag means at once. A \
      bundle's messages take effect together, on one sample, or none of them does. Each \
      message is answered to its sender (UDP: its address and port, or --reply-port; TCP: the same \
      connection) with /rampd/reply ,ss ADDRESS RESULT-JSON, or /rampd/error ,sss ADDRESS CODE MESSAGE. \
      A malformed packet is logged and dropped, unanswered. --map maps a controller's fixed address \
      (a TouchOSC fader sending 0..1) onto a key path, with a range and a curve. docs/OSC.md has the \
      whole address space.

      Environment: RAMPD_OSC_LISTEN, RAMPD_OSC_ALLOW and RAMPD_OSC_MAP (several separated by \
      spaces) stand for the flags; RAMPD_SOCKET (or RAMPD_SOCKET_PATH) for --socket.
      """,
    version: RampdBuild.version
  )

  @Option(help: "The address and port to listen on, UDP and TCP (default 127.0.0.1:9000; port 0 picks a free one).")
  var listen: String?

  @Option(
    help: ArgumentHelp(
      "A source address or range allowed to send (repeatable): 192.168.1.0/24, ::1, any.",
      discussion: "Default: loopback only (127.0.0.0/8 and ::1). Other senders are logged and ignored."))
  var allow: [String] = []

  @Option(
    help: ArgumentHelp("A fixed address mapped onto a key path (repeatable): \(Mapping.forms).", valueName: "map"))
  var map: [String] = []

  @Option(help: "Which messages are answered: all, errors or none (default all).")
  var replies: String = "all"

  @Option(
    name: .customLong("reply-port"),
    help: "Answer UDP senders on this port of their address, not the one they sent from.")
  var replyPort: Int?

  @Option(help: "rampd's socket (default: as rampctl finds it).")
  var socket: String?

  public init() {}

  public mutating func run() throws {
    let environment = ProcessInfo.processInfo.environment
    let settings: OSCSettings
    do {
      settings = try Self.settings(
        listen: listen, allow: allow, map: map, replies: replies, replyPort: replyPort, socket: socket,
        environment: environment)
    } catch {
      // Exit 64 (EX_USAGE), as rampd and rampctl do for bad usage; systemd does not restart it.
      throw ValidationError(error.message)
    }
    let server: OSCServer
    do {
      server = try OSCServer(settings: settings)
    } catch {
      writeText("rampd-osc: \(error.message)\n", to: STDERR_FILENO)
      throw ExitCode.failure
    }
    server.run()
  }

  static func settings(
    listen: String?, allow: [String], map: [String], replies: String, replyPort: Int?, socket: String?,
    environment: [String: String]
  ) throws(Refusal) -> OSCSettings {
    let listenText = listen ?? environment["RAMPD_OSC_LISTEN"] ?? "127.0.0.1:9000"
    guard let address = Self.address(listenText) else {
      throw Refusal(
        code: "invalid-listen",
        message: "--listen '\(listenText)': expected an IP address and a port, such as 127.0.0.1:9000 or [::1]:9000")
    }
    let allowTexts = allow.isEmpty ? Self.words(environment["RAMPD_OSC_ALLOW"]) : allow
    var ranges: [SourceRange] = []
    for text in allowTexts { ranges.append(try SourceRange(parsing: text)) }
    var space = AddressSpace()
    for text in map.isEmpty ? Self.words(environment["RAMPD_OSC_MAP"]) : map {
      let mapping = try Mapping(parsing: text)
      guard space.mappings[mapping.address] == nil else {
        throw Refusal(code: "invalid-map", message: "--map: \(mapping.address) is mapped twice")
      }
      space.mappings[mapping.address] = mapping
    }
    guard let mode = ReplyMode(rawValue: replies) else {
      throw Refusal(code: "invalid-replies", message: "--replies '\(replies)': expected all, errors or none")
    }
    if let replyPort, !(1...65_535).contains(replyPort) {
      throw Refusal(code: "invalid-reply-port", message: "--reply-port \(replyPort): expected a port 1 to 65535")
    }
    return OSCSettings(
      listen: address, allow: ranges.isEmpty ? SourceRange.loopback : ranges, space: space,
      socket: SocketLocation.clientPath(option: socket, environment: environment, isRoot: geteuid() == 0),
      replies: mode, replyPort: replyPort.map { UInt16($0) })
  }

  /// `127.0.0.1:9000`, `[::1]:9000` or `localhost:9000`.
  static func address(_ text: String) -> SocketAddress? {
    guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
    var host = String(text[..<colon])
    if host.hasPrefix("[") && host.hasSuffix("]") {
      host = String(host.dropFirst().dropLast())
    } else if host.contains(":") {
      return nil
    }
    return SocketAddress(host: host, port: port)
  }

  private static func words(_ text: String?) -> [String] {
    (text ?? "").split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\n" }).map(String.init)
  }
}
