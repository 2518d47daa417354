import Testing
@Test func placeholderProtocol() { #expect(Bool(true)) }
