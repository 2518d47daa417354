import Foundation
import Testing

@testable import RampTestSupport

/// rampd and rampctl use Foundation's essentials only (FoundationEssentials, the standard
/// library, the C library): Foundation's internationalisation (`String(format:)`, `Thread`,
/// `NSString`, `CharacterSet`, `TimeZone.current` …) brings ICU and its 37 MB of data into every
/// binary that calls one of them. A debug build links Foundation's libraries dynamically: the
/// binary must use none of their symbols (TOMLKit imports Foundation, so the libraries may be
/// among its NEEDED entries; a static build takes from them only what is used). A static release
/// build (`--static-swift-stdlib`), stripped or not, must not hold ICU's data, whose name starts
/// `icudt` (`icudt76l/…`, symbol `icudt76_dat`).
@Suite struct NoICUTests {
  @Test(arguments: ["rampd", "rampctl"])
  func usesNoInternationalisation(_ tool: String) throws {
    let binary = tool == "rampd" ? Executables.rampd : Executables.rampctl
    try NoICU.expectNoInternationalisation(binary)
  }

  @Test(arguments: ["rampd", "rampctl"])
  func holdsNoICUData(_ tool: String) throws {
    let binary = tool == "rampd" ? Executables.rampd : Executables.rampctl
    try NoICU.expectNoICUData(binary)
  }
}
