import RampEngine
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A decoder `prepare` started, until its stream joins the mix. Its thread holds it until
/// cancelled, so a stream that never joins (its command refused, a batch refused, a request
/// dropped before it ran) must stop it: that happens when the last reference to the prepared
/// stream goes (off the render thread: a committed command is let go of on the recovery thread).
final class UnstartedDecoder: @unchecked Sendable {
  let decoder: StreamDecoder
  /// Set on the render thread when the stream joins the mix.
  var joined = false

  init(_ decoder: StreamDecoder) { self.decoder = decoder }

  deinit { if !joined { decoder.cancel() } }
}

/// A stream made ready off the render thread (`Player.prepare`): its file open, its decoder
/// prefilled, its properties, its first ramp and its place in the mix built. Joining the mix
/// allocates nothing.
public final class PreparedStream: RenderCommand, @unchecked Sendable {
  public let id: String
  public let path: String
  private let unstarted: UnstartedDecoder
  private let stream: PlayingStream
  /// The fade-in (on the gain) or the declick ramp (on the transport level), if any.
  private let ramp: (animation: PreparedAnimation, on: PropertyHandle)?
  private let fadesIn: Bool
  /// Set when it joined: the fade-in's id and begin sample (nil: none).
  public private(set) var fadeIn: (id: UInt64, sample: Int64)?
  /// Its loudness trim, when it is normalised.
  public let trim: LoudnessTrim?

  init(
    id: String, path: String, unstarted: UnstartedDecoder, stream: PlayingStream,
    ramp: (animation: PreparedAnimation, on: PropertyHandle)?, fadesIn: Bool, trim: LoudnessTrim? = nil
  ) {
    self.trim = trim
    self.id = id
    self.path = path
    self.unstarted = unstarted
    self.stream = stream
    self.ramp = ramp
    self.fadesIn = fadesIn
  }

  public func commit(_ state: RenderState) { _ = join(state) }

  /// Why a stream did not join, as plain values.
  public enum Refusal: Error {
    case alreadyPlaying
    /// The engine refused its first ramp.
    case refused(EngineError)
  }

  /// Joins the mix (render thread), or fails if a stream `id` plays already. Allocation-free.
  public func callAsFunction(_ state: RenderState) -> Result<Void, Refusal> { join(state) }

  private func join(_ state: RenderState) -> Result<Void, Refusal> {
    if state.contains(stream: id) {
      unstarted.decoder.cancel()
      return .failure(.alreadyPlaying)
    }
    let engine = state.engine
    engine.define(stream.gain)
    engine.define(stream.transport)
    engine.define(stream.pan)
    if let ramp {
      do throws(EngineError) {
        let id = try engine.commit(ramp.animation, to: ramp.on)
        if fadesIn { fadeIn = (id, engine.now) }
      } catch {
        engine.undefine(stream.gain)
        engine.undefine(stream.transport)
        engine.undefine(stream.pan)
        unstarted.decoder.cancel()
        return .failure(.refused(error))
      }
    }
    state.streams.append(stream)
    unstarted.joined = true
    state.post(.streamStarted(id: id, path: path))
    if let queue = stream.queue { state.post(.itemStarted(stream: id, item: queue.item, sample: engine.now)) }
    return .success(())
  }
}

/// A pause, resume or stop made ready off the render thread (`Player.prepareTransport`): a ramp
/// prepared for each stream it may act on, and room for what it did.
public final class PreparedTransport: RenderCommand, @unchecked Sendable {
  public enum Kind: Sendable {
    case pause, resume, stop
  }

  public let kind: Kind
  /// The stream (nil: every stream).
  public let stream: String?
  private let transaction: Transaction
  private let sampleRate: Double
  /// One ramp per stream it may act on (none if the transaction was refused: the streams then
  /// change state without one).
  private let ramps: ContiguousArray<PreparedAnimation>
  private let refused: Bool
  /// The streams it acted on, with their ramps' ids (written by the commit).
  public private(set) var changes: ContiguousArray<TransportChange> = []

  init(_ kind: Kind, _ stream: String?, transaction: Transaction, sampleRate: Double, capacity: Int) {
    self.kind = kind
    self.stream = stream
    self.transaction = transaction
    self.sampleRate = sampleRate
    var ramps = ContiguousArray<PreparedAnimation>()
    var refused = false
    do throws(EngineError) {
      for _ in 0..<capacity {
        guard
          let ramp = try PreparedAnimation.implicitAction(
            to: kind == .resume ? 1 : 0, on: "", transaction: transaction, sampleRate: sampleRate)
        else { break }
        ramps.append(ramp)
      }
    } catch {
      refused = true
    }
    self.ramps = ramps
    self.refused = refused
    changes.reserveCapacity(capacity)
  }

  /// Changes the streams it names (render thread). Allocation-free for as many streams as ramps
  /// were prepared.
  public func commit(_ state: RenderState) {
    let level: Double = kind == .resume ? 1 : 0
    var used = 0
    var index = 0
    while index < state.streams.count {
      let playing = state.streams[index]
      index += 1
      guard stream == nil || playing.id == stream else { continue }
      switch kind {
      case .pause: guard !playing.stopping && !playing.paused else { continue }
      case .resume: guard playing.paused && !playing.stopping else { continue }
      case .stop: guard !playing.stopping else { continue }
      }
      var animation: UInt64?
      if !refused {
        if used < ramps.count {
          animation = (try? state.engine.set(playing.transport, to: level, action: ramps[used])) ?? nil
          used += 1
        } else {
          // More streams than ramps prepared: one more, made here.
          animation = (try? state.engine.set(playing.transport.keyPath, to: level, transaction: transaction)) ?? nil
        }
      }
      switch kind {
      case .pause: playing.paused = true
      case .resume: playing.paused = false
      case .stop: playing.stopping = true
      }
      changes.append(TransportChange(stream: playing.id, animation: animation))
    }
  }
}
