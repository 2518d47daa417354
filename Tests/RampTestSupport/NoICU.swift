import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Whether a binary of ours carries Foundation's internationalisation (`String(format:)`,
/// `Thread`, `NSString`, `CharacterSet`, `TimeZone.current` …), hence ICU and its 37 MB of data:
/// in a debug build, by the symbols it uses of those libraries (a library may be among its NEEDED
/// entries without one used, through a dependency that imports Foundation: a static build takes
/// only what is used); in a static build, by ICU's data itself (`icudt…`).
enum NoICU {
  /// The libraries of Foundation's internationalisation, hence ICU.
  static let internationalisation = [
    "libFoundation.so", "libFoundationInternationalization.so", "lib_FoundationICU.so",
  ]

  /// Expects `binary` to use no symbol of Foundation's internationalisation.
  static func expectNoInternationalisation(_ binary: String) throws {
    let undefined = Set(try symbols(["--dynamic", "--undefined-only", binary]))
    for (name, path) in try sharedLibraries(binary) where internationalisation.contains(name) {
      let used = undefined.intersection(try symbols(["--dynamic", "--defined-only", path])).sorted()
      #expect(
        used.isEmpty,
        """
        \(binary) uses \(used.count) symbol(s) of \(name), Foundation's internationalisation (and ICU's \
        data in a static build): \(demangled(Array(used.prefix(5))))
        """)
    }
  }

  /// Expects `binary` not to hold ICU's data.
  static func expectNoICUData(_ binary: String) throws {
    let bytes = try Data(contentsOf: URL(fileURLWithPath: binary), options: .alwaysMapped)
    let found = bytes.withUnsafeBytes { contains($0, Array("icudt".utf8)) }
    #expect(!found, "\(binary) holds ICU's data (icudt…): it links _FoundationICU statically")
  }

  /// `names` as Swift source spells them (swift-demangle), else as they are.
  static func demangled(_ names: [String]) -> String {
    let shown = try? runProcess("/usr/bin/env", ["swift-demangle", "--simplified"] + names)
    guard let shown, shown.status == 0 else { return names.joined(separator: " ") }
    return shown.stdout.split(separator: "\n").joined(separator: "; ")
  }

  /// The names nm lists (its last column, without a symbol version).
  static func symbols(_ arguments: [String]) throws -> [String] {
    let listed = try runProcess("/usr/bin/nm", arguments)
    try #require(listed.status == 0, "nm \(arguments.joined(separator: " ")): \(listed)")
    return listed.stdout.split(separator: "\n").compactMap { line in
      line.split(separator: " ").last.map { String($0.prefix { $0 != "@" }) }
    }
  }

  /// The shared libraries the binary loads, by name, where the loader finds them (ldd).
  static func sharedLibraries(_ binary: String) throws -> [(name: String, path: String)] {
    let listed = try runProcess("/usr/bin/ldd", [binary])
    try #require(listed.status == 0, "ldd \(binary): \(listed)")
    return listed.stdout.split(separator: "\n").compactMap { line in
      let parts = line.split(separator: " ")
      guard parts.count >= 3, parts[1] == "=>", parts[2].hasPrefix("/") else { return nil }
      return (String(parts[0].trimmingCharacters(in: .whitespaces)), String(parts[2]))
    }
  }

  /// Whether `haystack` holds `needle`: memchr to each of its first byte, then the rest compared.
  static func contains(_ haystack: UnsafeRawBufferPointer, _ needle: [UInt8]) -> Bool {
    guard let base = haystack.baseAddress, haystack.count >= needle.count else { return false }
    var offset = 0
    while offset <= haystack.count - needle.count {
      guard let hit = memchr(base + offset, Int32(needle[0]), haystack.count - offset) else { return false }
      offset = base.distance(to: UnsafeRawPointer(hit))
      if offset > haystack.count - needle.count { return false }
      var same = true
      for index in 1..<needle.count where haystack[offset + index] != needle[index] {
        same = false
        break
      }
      if same { return true }
      offset += 1
    }
    return false
  }
}
