// The transport's floor for benchmark (a): SwiftNIO serving rampd's socket protocol with no work
// at all. It greets as rampd does and answers every request line with the reply rampd gives an
// instant `set` of master.gain, without reading it. No real daemon can answer faster over NIO on
// the same machine, so its round trips bound what rampd can reach there.
//
//   nio-floor <socket path>
import Foundation
import NIOCore
import NIOPosix

final class FixedReplies: ChannelInboundHandler, Sendable {
  typealias InboundIn = ByteBuffer
  typealias OutboundOut = ByteBuffer
  static let greeting = #"{"hello":"rampd","version":"floor","protocol":1}"# + "\n"
  static let reply = #"{"id":0,"ok":true,"result":{"key":"master.gain","animation":null,"value":0.6}}"# + "\n"

  func channelActive(context: ChannelHandlerContext) {
    context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: Self.greeting)), promise: nil)
  }

  /// One reply per newline: a line split across reads is answered once its newline comes.
  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    let lines = unwrapInboundIn(data).readableBytesView.lazy.filter { $0 == UInt8(ascii: "\n") }.count
    guard lines > 0 else { return }
    var buffer = context.channel.allocator.buffer(capacity: Self.reply.utf8.count * lines)
    for _ in 0..<lines { buffer.writeString(Self.reply) }
    context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
  }
}

guard CommandLine.arguments.count == 2 else {
  FileHandle.standardError.write(Data("usage: nio-floor <socket path>\n".utf8))
  exit(2)
}
let path = CommandLine.arguments[1]
unlink(path)
// One event loop thread, as rampd's server has.
let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
let channel = try ServerBootstrap(group: group)
  .serverChannelOption(.backlog, value: 64)
  .childChannelInitializer { channel in
    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(FixedReplies()) }
  }
  .bind(unixDomainSocketPath: path).wait()
try channel.closeFuture.wait()
