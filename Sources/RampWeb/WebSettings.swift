import FoundationEssentials
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif
// C's `in_addr` and `in6_addr` are found through SwiftNIO's CNIOLinux too, whose header includes
// <netinet/in.h>: MemberImportVisibility then wants that module named.
#if canImport(CNIOLinux)
  import CNIOLinux
#endif

/// What rampd-web serves, where, and to whom: its flags and environment, checked.
///
/// The rules that keep a page for a headless box from becoming a remote control for anyone on the
/// machine or the network: every request carries a token, and rampd-web listens on a loopback
/// address unless told another, which needs a token given rather than made.
struct WebSettings: Equatable {
  /// The address to bind, as given (`localhost` binds 127.0.0.1).
  var address: String
  var port: Int
  /// The token every request must carry (header, query or cookie: `AccessCheck`): the one
  /// configured, else (nil after `resolve`) the one `WebToken` keeps.
  var token: String?
  /// rampd's socket.
  var socket: String

  /// The page's address, the token included, as a person opens it.
  func url(port: Int) -> String {
    let host = address.contains(":") ? "[\(address)]" : address
    return "http://\(host):\(port)/?token=\(token ?? "")"
  }

  static let defaultAddress = "127.0.0.1"
  static let defaultPort = 6690
  static let minimumTokenLength = 16

  /// The environment variables rampd-web reads; its flags win over them.
  enum Variable {
    static let listen = "RAMPD_WEB_LISTEN"
    static let port = "RAMPD_WEB_PORT"
    static let token = "RAMPD_WEB_TOKEN"
  }

  /// A refusal to start, with the text printed after `rampd-web: `.
  struct Invalid: Error, Equatable, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
  }

  /// Reads the settings from the flags (nil when not given) and the environment, or says which
  /// flag or variable is wrong and why.
  static func resolve(
    listen: String?, port: Int?, tokenFile: String?, socket: String?, environment: [String: String],
    isRoot: Bool, readFile: (String) throws -> String = { try String(contentsOfFile: $0, encoding: .utf8) }
  ) throws(Invalid) -> WebSettings {
    let (address, addressSource) = pick(listen, "--listen", environment[Variable.listen], Variable.listen)
    let chosenAddress = address ?? defaultAddress
    guard let loopback = isLoopback(chosenAddress) else {
      throw Invalid(
        "\(addressSource ?? "--listen") '\(chosenAddress)' is not an IP address (give one such as 127.0.0.1, ::1 or 0.0.0.0, or localhost)"
      )
    }

    var chosenPort = defaultPort
    if let port {
      chosenPort = port
    } else if let text = environment[Variable.port], !text.isEmpty {
      guard let number = Int(text) else {
        throw Invalid("\(Variable.port) '\(text)' is not a port number (0 to 65535)")
      }
      chosenPort = number
    }
    guard (0...65_535).contains(chosenPort) else {
      throw Invalid(
        "\(port != nil ? "--port" : Variable.port) \(chosenPort) is out of range: a port is 0 to 65535 (0: any free port)"
      )
    }

    var token: String?
    var tokenSource = ""
    if let tokenFile {
      tokenSource = "the token in --token-file \(tokenFile)"
      do {
        token = try readFile(tokenFile).trimmingWhitespace()
      } catch {
        throw Invalid("--token-file \(tokenFile) cannot be read: \(failureReason(error))")
      }
    } else if let value = environment[Variable.token], !value.isEmpty {
      tokenSource = "the token in \(Variable.token)"
      token = value
    }
    if let token {
      guard token.count >= minimumTokenLength else {
        throw Invalid("\(tokenSource) has \(token.count) characters; a token needs at least \(minimumTokenLength)")
      }
      guard token.unicodeScalars.allSatisfy(isTokenCharacter) else {
        throw Invalid("\(tokenSource) may hold only letters, digits and . _ ~ - (it travels in URLs and headers)")
      }
    }

    if !loopback && token == nil {
      throw Invalid(
        "\(addressSource ?? "--listen") \(chosenAddress) is not a loopback address: listening there needs a token of your own "
          + "(--token-file FILE or \(Variable.token)), not one rampd-web makes and keeps on this machine"
      )
    }
    let socketPath = SocketLocation.clientPath(option: socket, environment: environment, isRoot: isRoot)
    return WebSettings(
      address: chosenAddress == "localhost" ? defaultAddress : chosenAddress, port: chosenPort, token: token,
      socket: socketPath)
  }

  /// The flag's value when given, else the variable's (empty counts as unset), with its name.
  private static func pick(_ flag: String?, _ flagName: String, _ variable: String?, _ variableName: String) -> (
    String?, String?
  ) {
    if let flag { return (flag, flagName) }
    if let variable, !variable.isEmpty { return (variable, variableName) }
    return (nil, nil)
  }

  /// Whether `address` (an IPv4 or IPv6 literal, or `localhost`) is a loopback address; nil when
  /// it is neither a literal nor `localhost`.
  static func isLoopback(_ address: String) -> Bool? {
    if address == "localhost" { return true }
    var v4 = in_addr()
    if inet_pton(AF_INET, address, &v4) == 1 {
      return UInt32(bigEndian: v4.s_addr) >> 24 == 127
    }
    var v6 = in6_addr()
    if inet_pton(AF_INET6, address, &v6) == 1 {
      let bytes = withUnsafeBytes(of: v6) { Array($0) }
      if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }  // ::1
      // ::ffff:127.x.y.z, an IPv4 loopback address written as IPv6.
      return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
    }
    return nil
  }

  static func isTokenCharacter(_ scalar: Unicode.Scalar) -> Bool {
    switch scalar {
    case "a"..."z", "A"..."Z", "0"..."9", ".", "_", "~", "-": return true
    default: return false
    }
  }
}
