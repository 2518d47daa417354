import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Why reading or making a file failed, for a message: the C library's text for the system error
/// beneath Foundation's (`No such file or directory`), else the error's own description.
public func failureReason(_ error: any Error) -> String {
  let system: POSIXError? =
    (error as? POSIXError) ?? ((error as? CocoaError)?.userInfo["NSUnderlyingError"] as? POSIXError)
  guard let system else { return "\(error)" }
  return String(cString: strerror(system.code.rawValue))
}

/// All the bytes left to read from `descriptor` (0: standard input), retrying on interruption;
/// what was read before an error.
public func readToEnd(_ descriptor: Int32) -> [UInt8] {
  var bytes: [UInt8] = []
  var chunk = [UInt8](repeating: 0, count: 65_536)
  while true {
    let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
    if count < 0 && errno == EINTR { continue }
    guard count > 0 else { return bytes }
    bytes.append(contentsOf: chunk[..<count])
  }
}
