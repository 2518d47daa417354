import NIOCore
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Who is at the other end of a connection, as the kernel recorded it when they connected.
public struct Peer: Sendable, Equatable, CustomStringConvertible {
  public var pid: Int32
  public var uid: UInt32
  public var gid: UInt32
  /// Supplementary groups, without the root group (see `PeerCredentials.groups`).
  public var groups: [UInt32]

  public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32] = []) {
    self.pid = pid
    self.uid = uid
    self.gid = gid
    self.groups = groups
  }

  public var description: String {
    let name = Accounts.userName(uid).map { " (\($0))" } ?? ""
    return "uid \(uid)\(name), pid \(pid)"
  }
}

/// Which peers may use the daemon, and which of them may open only files under the media roots.
///
/// Root and the daemon's own user are always admitted and never confined. Others are admitted when
/// `[access] users` names them (or holds `"*"`), or when their primary or a supplementary group is
/// in `[access] groups` or owns the socket; they may play only files inside `[media] roots`.
public struct AccessPolicy: Sendable, Equatable {
  let ownUID: UInt32
  let anyone: Bool
  let users: Set<UInt32>
  let groups: Set<UInt32>

  /// Resolves the names in `access` (and the socket's group); an unknown name is an error that
  /// names the key, so a typo does not silently lock a user out.
  public init(access: AccessSettings, socketGroup: String?, ownUID: UInt32 = geteuid()) throws(AccessError) {
    self.ownUID = ownUID
    anyone = access.users.contains("*")
    var users: Set<UInt32> = []
    for name in access.users where name != "*" {
      guard let uid = Accounts.uid(name) else { throw AccessError("access.users: no user '\(name)'") }
      users.insert(uid)
    }
    var groups: Set<UInt32> = []
    for name in access.groups {
      guard let gid = Accounts.gid(name) else { throw AccessError("access.groups: no group '\(name)'") }
      groups.insert(gid)
    }
    if let socketGroup, let gid = Accounts.gid(socketGroup) { groups.insert(gid) }
    self.users = users
    self.groups = groups
  }

  /// Root or the daemon's own user: trusted with any file the daemon itself may play.
  public func isOwner(_ peer: Peer) -> Bool { peer.uid == 0 || peer.uid == ownUID }

  public func admits(_ peer: Peer) -> Bool {
    isOwner(peer) || anyone || users.contains(peer.uid) || groups.contains(peer.gid)
      || peer.groups.contains(where: groups.contains)
  }

  /// The line sent instead of the greeting.
  public static func refusal(for peer: Peer) -> ProtocolError {
    ProtocolError(
      .permissionDenied,
      "\(peer) may not use rampd: it is not root, not rampd's user, and not admitted by [access] users or groups"
        + " or the socket's group")
  }
}

public struct AccessError: Error, Sendable, CustomStringConvertible {
  public let description: String
  init(_ description: String) { self.description = description }
}

/// Reads a connection's credentials from the kernel (`SO_PEERCRED`, `SO_PEERGROUPS`).
enum PeerCredentials {
  /// Nil when the kernel cannot say (not a Unix socket), which the caller treats as a stranger.
  static func read(from channel: Channel) -> EventLoopFuture<Peer?> {
    guard let provider = channel as? SocketOptionProvider else { return channel.eventLoop.makeSucceededFuture(nil) }
    let credentials: EventLoopFuture<Credentials> = provider.unsafeGetSocketOption(
      level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
    let groups: EventLoopFuture<GroupList> = provider.unsafeGetSocketOption(
      level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERGROUPS))
    let optionalGroups = groups.map { Optional.some($0) }.recover { _ in GroupList?.none }
    return credentials.and(optionalGroups).map { credentials, groups -> Peer? in
      Peer(
        pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: groups.map(Self.groups) ?? [])
    }.recover { _ in nil }
  }

  /// `struct ucred`, which Glibc's module hides behind `_GNU_SOURCE`.
  struct Credentials: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
  }

  /// Up to 64 groups; a peer in more is judged by its uid and primary group only (the kernel
  /// refuses the call with ERANGE).
  typealias GroupList = InlineArray<64, gid_t>

  /// The kernel fills as many entries as the peer has and the rest stay zero, so a zero cannot be
  /// told from the root group: the root group counts only as a primary group.
  static func groups(_ list: GroupList) -> [UInt32] {
    var result: [UInt32] = []
    for index in list.indices where list[index] != 0 { result.append(list[index]) }
    return result
  }
}

/// The user and group databases (`getpwnam_r`, `getgrnam_r`): thread-safe lookups.
enum Accounts {
  /// A uid given by name or number.
  static func uid(_ name: String) -> UInt32? {
    if let number = UInt32(name) { return number }
    return withBuffer { buffer in
      var entry = passwd()
      var found: UnsafeMutablePointer<passwd>?
      let status = getpwnam_r(name, &entry, buffer.baseAddress!, buffer.count, &found)
      return (status, found == nil ? nil : entry.pw_uid)
    }
  }

  /// A gid given by name or number.
  static func gid(_ name: String) -> UInt32? {
    if let number = UInt32(name) { return number }
    return withBuffer { buffer in
      var entry = group()
      var found: UnsafeMutablePointer<group>?
      let status = getgrnam_r(name, &entry, buffer.baseAddress!, buffer.count, &found)
      return (status, found == nil ? nil : entry.gr_gid)
    }
  }

  static func userName(_ uid: UInt32) -> String? {
    withBuffer { buffer in
      var entry = passwd()
      var found: UnsafeMutablePointer<passwd>?
      let status = getpwuid_r(uid, &entry, buffer.baseAddress!, buffer.count, &found)
      return (status, found == nil ? nil : String(cString: entry.pw_name))
    }
  }

  /// Runs a `*_r` lookup with a buffer that grows while the call says ERANGE.
  private static func withBuffer<T>(_ body: (UnsafeMutableBufferPointer<CChar>) -> (CInt, T?)) -> T? {
    var size = 1024
    while size <= 1 << 20 {
      let buffer = UnsafeMutableBufferPointer<CChar>.allocate(capacity: size)
      defer { buffer.deallocate() }
      let (status, value) = body(buffer)
      if status == ERANGE {
        size *= 4
        continue
      }
      return value
    }
    return nil
  }
}
