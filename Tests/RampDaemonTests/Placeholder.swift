import Testing
@Test func placeholderDaemon() { #expect(Bool(true)) }
