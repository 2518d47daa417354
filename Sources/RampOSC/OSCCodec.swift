import CLiblo
import FoundationEssentials

#if canImport(Glibc)
  import Glibc
#endif

/// When a message is to take effect: at once, or at a wall-clock time from its bundle's timetag.
enum OSCTime: Equatable, Sendable {
  case immediately
  /// Unix seconds.
  case at(Double)

  /// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
  static let ntpToUnix = 2_208_988_800.0

  /// The time an OSC timetag stands for: (0, 1) is "immediately" (OSC 1.0), anything else NTP
  /// seconds and fractions of 2⁻³² s.
  init(seconds: UInt32, fraction: UInt32) {
    if seconds == 0 && fraction == 1 {
      self = .immediately
    } else {
      self = .at(Double(seconds) - Self.ntpToUnix + Double(fraction) / 4_294_967_296)
    }
  }
}

/// One argument of a received message, as far as rampd-osc reads it.
enum OSCArgument: Equatable, Sendable {
  /// `f`, `d`, `i` or `h`, with its tag.
  case number(Double, tag: Character)
  /// `s` or `S`.
  case string(String)
  /// Any other type (`T`, `F`, `N`, a blob, …), by its tag.
  case other(Character)

  var tag: Character {
    switch self {
    case .number(_, let tag): return tag
    case .string: return "s"
    case .other(let tag): return tag
    }
  }
}

/// One message of a packet, with the time its bundle gives it.
struct OSCMessage: Equatable, Sendable {
  var address: String
  var arguments: [OSCArgument]
  var time: OSCTime

  /// The type tags as sent, `,sf` for a string and a float.
  var typeTags: String { "," + String(arguments.map(\.tag)) }
}

extension [OSCMessage] {
  /// The messages of a packet that take effect together: those of one time (a bundle's, or a
  /// nested bundle's own), in the order each time first appears, each group in packet order. A
  /// message outside any bundle is a packet, and a group, of its own.
  var takingEffectTogether: [[OSCMessage]] {
    var groups: [[OSCMessage]] = []
    for message in self {
      if let index = groups.firstIndex(where: { $0[0].time == message.time }) {
        groups[index].append(message)
      } else {
        groups.append([message])
      }
    }
    return groups
  }
}

/// Why a packet cannot be read: logged, never answered.
struct MalformedPacket: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// Reads OSC packets (a message, or a bundle of messages and bundles) and writes the replies.
///
/// liblo (`lo_message_deserialise`) reads and checks each message: its address and type tag
/// strings, every argument's size and padding. A bundle's envelope (`#bundle`, its timetag, its
/// elements each with their size) is read here, since liblo reads bundles only inside its own
/// server; nested bundles go at most `maxDepth` deep, and none may be due before the bundle
/// that holds it (OSC 1.0). A packet is taken whole or not at all: one bad element rejects it.
enum OSCCodec {
  static let maxDepth = 8
  static let bundleTag: [UInt8] = Array("#bundle".utf8) + [0]

  static func decode(_ bytes: [UInt8]) throws(MalformedPacket) -> [OSCMessage] {
    var messages: [OSCMessage] = []
    try decode(bytes[...], time: .immediately, depth: 0, into: &messages)
    return messages
  }

  private static func decode(
    _ bytes: ArraySlice<UInt8>, time: OSCTime, depth: Int, into messages: inout [OSCMessage]
  ) throws(MalformedPacket) {
    guard let first = bytes.first else { throw MalformedPacket("an empty packet") }
    if first == UInt8(ascii: "/") {
      messages.append(try message(bytes, time: time))
      return
    }
    guard bytes.starts(with: bundleTag) else {
      throw MalformedPacket("neither a message (an address starting with /) nor a bundle (#bundle)")
    }
    guard depth < maxDepth else { throw MalformedPacket("bundles nested more than \(maxDepth) deep") }
    guard bytes.count >= 16 else { throw MalformedPacket("a bundle of \(bytes.count) bytes has no timetag") }
    let start = bytes.startIndex
    let tagged = OSCTime(seconds: word(bytes, start + 8), fraction: word(bytes, start + 12))
    var own = tagged
    switch (time, tagged) {
    case (.at, .immediately):
      own = time
    case (.at(let outer), .at(let inner)) where inner < outer:
      throw MalformedPacket("a bundle inside another is due before it (OSC 1.0 forbids it)")
    default:
      break
    }
    var offset = start + 16
    while offset < bytes.endIndex {
      guard bytes.endIndex - offset >= 4 else {
        throw MalformedPacket("a bundle element at byte \(offset - start) has no complete size")
      }
      let size = Int(Int32(bitPattern: word(bytes, offset)))
      offset += 4
      guard size > 0, size % 4 == 0, size <= bytes.endIndex - offset else {
        throw MalformedPacket(
          "a bundle element at byte \(offset - 4 - start) gives its size as \(size), but \(bytes.endIndex - offset) bytes follow (a size is a positive multiple of 4)"
        )
      }
      try decode(bytes[offset..<offset + size], time: own, depth: depth + 1, into: &messages)
      offset += size
    }
  }

  private static func word(_ bytes: ArraySlice<UInt8>, _ index: Int) -> UInt32 {
    (0..<4).reduce(UInt32(0)) { $0 << 8 | UInt32(bytes[index + $1]) }
  }

  /// One message, read by liblo.
  private static func message(_ bytes: ArraySlice<UInt8>, time: OSCTime) throws(MalformedPacket) -> OSCMessage {
    var data = Array(bytes)
    var result: Int32 = 0
    let decoded = data.withUnsafeMutableBytes { lo_message_deserialise($0.baseAddress, $0.count, &result) }
    guard let decoded else { throw MalformedPacket("not an OSC message: \(libloError(result))") }
    defer { lo_message_free(decoded) }
    // liblo has checked that the address is a NUL-terminated, padded string.
    let end = data.firstIndex(of: 0) ?? data.endIndex
    let addressBytes = data[..<end]
    guard addressBytes.allSatisfy({ (0x21...0x7e).contains($0) }) else {
      throw MalformedPacket("an address with a byte that is not printable ASCII")
    }
    let address = String(decoding: addressBytes, as: UTF8.self)
    let count = Int(lo_message_get_argc(decoded))
    guard let types = lo_message_get_types(decoded) else { throw MalformedPacket("\(address): no type tags") }
    let tags = Array(String(cString: types).utf8)
    let argv = lo_message_get_argv(decoded)
    var arguments: [OSCArgument] = []
    for index in 0..<min(count, tags.count) {
      let tag = Character(UnicodeScalar(tags[index]))
      let value = argv?[index]
      switch (tag, value) {
      case ("f", let value?): arguments.append(.number(Double(value.pointee.f), tag: tag))
      case ("d", let value?): arguments.append(.number(value.pointee.d, tag: tag))
      case ("i", let value?): arguments.append(.number(Double(value.pointee.i), tag: tag))
      case ("h", let value?): arguments.append(.number(Double(value.pointee.h), tag: tag))
      case ("s", let value?), ("S", let value?):
        let text = UnsafeRawPointer(value).assumingMemoryBound(to: CChar.self)
        guard let string = String(validatingCString: text) else {
          throw MalformedPacket("\(address): argument \(index + 1) is a string that is not UTF-8")
        }
        arguments.append(.string(string))
      default:
        arguments.append(.other(tag))
      }
    }
    return OSCMessage(address: address, arguments: arguments, time: time)
  }

  /// liblo's reason for refusing a message, in words.
  private static func libloError(_ code: Int32) -> String {
    switch code {
    case LO_ESIZE: return "its arguments do not fill it exactly"
    case LO_EINVALIDPATH: return "its address is not a padded string starting with /"
    case LO_ENOTYPE: return "it has no type tag string"
    case LO_EINVALIDTYPE: return "its type tag string is not a padded string"
    case LO_EBADTYPE: return "its type tag string does not start with ','"
    case LO_EINVALIDARG: return "an argument is cut short or of an unknown type"
    default: return "liblo error \(code)"
    }
  }

  /// A message of string arguments, as liblo writes it (`/rampd/reply ,ss address json`).
  static func encode(address: String, strings: [String]) -> [UInt8] {
    guard let message = lo_message_new() else { return [] }
    defer { lo_message_free(message) }
    for string in strings { _ = lo_message_add_string(message, string) }
    var size = 0
    guard let serialised = lo_message_serialise(message, address, nil, &size) else { return [] }
    defer { free(serialised) }
    return Array(UnsafeRawBufferPointer(start: serialised, count: size))
  }

  // MARK: SLIP (OSC 1.1's framing on a stream)

  static let end: UInt8 = 0xC0
  static let escape: UInt8 = 0xDB
  static let escapedEnd: UInt8 = 0xDC
  static let escapedEscape: UInt8 = 0xDD

  /// A packet framed for a stream: END, the packet with END and ESC escaped, END.
  static func slip(_ packet: [UInt8]) -> [UInt8] {
    var framed: [UInt8] = [end]
    framed.reserveCapacity(packet.count + 8)
    for byte in packet {
      switch byte {
      case end: framed += [escape, escapedEnd]
      case escape: framed += [escape, escapedEscape]
      default: framed.append(byte)
      }
    }
    framed.append(end)
    return framed
  }
}

/// Reads packets from a TCP stream as its bytes come. OSC 1.1 frames them with SLIP; OSC 1.0's
/// senders (liblo's `oscsend osc.tcp://…` among them) put each packet's size before it, as a
/// 32-bit big-endian integer. The first byte tells which: END (0xC0), `/` or `#` begin a SLIP
/// stream, anything else a size. A packet longer than `maxFrame` bytes, or a SLIP escape followed
/// by anything but ESC_END or ESC_ESC, is an error (the connection is closed).
struct StreamDecoder {
  enum Output: Equatable {
    case packet([UInt8])
    case error(String)
  }

  enum Framing: Equatable {
    case slip
    case sizePrefixed
  }

  let maxFrame: Int
  private(set) var framing: Framing?
  private var frame: [UInt8] = []
  private var escaped = false

  init(maxFrame: Int) { self.maxFrame = maxFrame }

  mutating func push(_ bytes: ArraySlice<UInt8>) -> [Output] {
    if framing == nil, let first = bytes.first {
      framing = [OSCCodec.end, UInt8(ascii: "/"), UInt8(ascii: "#")].contains(first) ? .slip : .sizePrefixed
    }
    return framing == .slip ? slip(bytes) : sizePrefixed(bytes)
  }

  private mutating func sizePrefixed(_ bytes: ArraySlice<UInt8>) -> [Output] {
    frame += bytes
    var outputs: [Output] = []
    var start = 0
    while frame.count - start >= 4 {
      let size = (start..<start + 4).reduce(0) { $0 << 8 | Int(frame[$1]) }
      guard size <= maxFrame else {
        outputs.append(.error("a packet's size is given as \(size) bytes, more than \(maxFrame)"))
        return outputs
      }
      guard frame.count - start - 4 >= size else { break }
      if size > 0 { outputs.append(.packet(Array(frame[start + 4..<start + 4 + size]))) }
      start += 4 + size
    }
    frame.removeFirst(start)
    return outputs
  }

  private mutating func slip(_ bytes: ArraySlice<UInt8>) -> [Output] {
    var outputs: [Output] = []
    for byte in bytes {
      if escaped {
        escaped = false
        switch byte {
        case OSCCodec.escapedEnd: frame.append(OSCCodec.end)
        case OSCCodec.escapedEscape: frame.append(OSCCodec.escape)
        default:
          outputs.append(.error("a SLIP escape (0xDB) followed by 0x\(String(byte, radix: 16, uppercase: true))"))
          return outputs
        }
      } else if byte == OSCCodec.end {
        // Empty frames (END END, an END to start with) are nothing.
        if !frame.isEmpty { outputs.append(.packet(frame)) }
        frame.removeAll(keepingCapacity: true)
        continue
      } else if byte == OSCCodec.escape {
        escaped = true
        continue
      } else {
        frame.append(byte)
      }
      if frame.count > maxFrame {
        outputs.append(.error("a SLIP frame longer than \(maxFrame) bytes"))
        return outputs
      }
    }
    return outputs
  }
}
